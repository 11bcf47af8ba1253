// Integers at any byte offset of a buffer, in the host's byte order
// (little-endian wherever rkv runs): how the region format and the
// fabrics' wire formats are read and written.
#ifndef RKV_COMMON_UNALIGNED_H_
#define RKV_COMMON_UNALIGNED_H_

#include <cstddef>
#include <cstring>

#include "absl/strings/string_view.h"

namespace rkv {

template <typename T>
void Put(void* out, size_t at, T v) {
  std::memcpy(static_cast<char*>(out) + at, &v, sizeof(T));
}

template <typename T>
T Get(const void* in, size_t at) {
  T v;
  std::memcpy(&v, static_cast<const char*>(in) + at, sizeof(T));
  return v;
}

template <typename T>
T Get(absl::string_view in, size_t at) {
  return Get<T>(in.data(), at);
}

}  // namespace rkv

#endif  // RKV_COMMON_UNALIGNED_H_
