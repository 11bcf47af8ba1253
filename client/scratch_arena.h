// Registered local memory that operations borrow for their requests'
// buffers: bucket reads, CAS results, blocks to write and read.
#ifndef RKV_CLIENT_SCRATCH_ARENA_H_
#define RKV_CLIENT_SCRATCH_ARENA_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

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
  using Ranges = std::map<uint64_t, uint64_t>;  // offset -> length

  // Adds a range to `ranges` in a spare node if there is one.
  void Insert(Ranges& ranges, uint64_t offset, uint64_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the range at `it`, keeping its node; returns the next one.
  Ranges::iterator Remove(Ranges& ranges, Ranges::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable std::mutex mu_;
  uint8_t* const base_;
  const uint64_t size_;
  Ranges free_ ABSL_GUARDED_BY(mu_);
  Ranges allocated_ ABSL_GUARDED_BY(mu_);
  // Map nodes of ranges removed, for ranges added later: every operation
  // allocates and frees scratch memory, and should not allocate heap memory
  // to do so.
  std::vector<Ranges::node_type> spare_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SCRATCH_ARENA_H_
