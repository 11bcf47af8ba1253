// The open-file limit. Servers hold a socket per client connection, and
// gRPC aborts instead of reporting an error when it cannot get a file
// descriptor, so programs check the limit up front.
#ifndef RKV_COMMON_FILE_LIMIT_H_
#define RKV_COMMON_FILE_LIMIT_H_

#include <cstdint>

#include "absl/status/status.h"

namespace rkv {

// Raises the soft RLIMIT_NOFILE to the hard limit. ResourceExhausted, naming
// the limit and `ulimit -n`, when even the hard limit is below `minimum`.
absl::Status EnsureFileLimit(uint64_t minimum);

}  // namespace rkv

#endif  // RKV_COMMON_FILE_LIMIT_H_
