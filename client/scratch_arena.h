// Registered local memory that operations borrow for their requests'
// buffers: bucket reads, CAS results, blocks to write and read.
#ifndef RKV_CLIENT_SCRATCH_ARENA_H_
#define RKV_CLIENT_SCRATCH_ARENA_H_

#include <cstdint>
#include <map>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace rkv::client_internal {

// First-fit allocator over [base, base + size) in 64-byte units.
// Thread-safe: a cluster client's sessions share one, and a session opens
// (and reads its region's header) on a background thread.
class ScratchArena {
 public:
  ScratchArena(uint8_t* base, uint64_t size);
  // nullptr when no free range is large enough.
  uint8_t* Allocate(uint64_t bytes);
  void Free(uint8_t* p);
  uint64_t size() const { return size_; }
  // Nothing is allocated.
  bool empty() const;

 private:
  mutable std::mutex mu_;
  uint8_t* const base_;
  const uint64_t size_;
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);       // offset -> length
  std::map<uint64_t, uint64_t> allocated_ ABSL_GUARDED_BY(mu_);  // offset -> length
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SCRATCH_ARENA_H_
