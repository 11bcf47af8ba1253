// Registered local memory that operations borrow for their requests'
// buffers: bucket reads, CAS results, blocks to write and read.
#ifndef RKV_CLIENT_SESSION_SCRATCH_ARENA_H_
#define RKV_CLIENT_SESSION_SCRATCH_ARENA_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace rkv::client_internal {

// First-fit allocator over [base, base + size) in 64-byte units, with a
// free list per small size in front: operations take and return buffers
// of a few sizes (bucket pairs, words, blocks) all the time, and a freed
// buffer of a size is the next one handed out for that size, without
// touching the ranges. Cached buffers go back to the ranges when an
// allocation finds no range large enough.
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
  // Sizes up to this many 64-byte units have a free list.
  static constexpr uint64_t kListedUnits = 64;

  // First fit from the free ranges; nullptr when none is large enough.
  uint8_t* TakeRange(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns [off, off + len) to the free ranges, merged with neighbours.
  void ReturnRange(uint64_t off, uint64_t len) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves every listed buffer back to the free ranges.
  void ReturnListed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a range to `free_` in a spare node if there is one.
  void Insert(uint64_t offset, uint64_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the range at `it`, keeping its node; returns the next one.
  Ranges::iterator Remove(Ranges::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable std::mutex mu_;
  uint8_t* const base_;
  const uint64_t size_;
  Ranges free_ ABSL_GUARDED_BY(mu_);
  // Per 64-byte unit: the length of the buffer allocated there, or 0.
  std::vector<uint32_t> allocated_units_ ABSL_GUARDED_BY(mu_);
  uint64_t allocated_count_ ABSL_GUARDED_BY(mu_) = 0;
  // listed_[u]: offsets of free buffers of u units.
  std::vector<std::vector<uint64_t>> listed_ ABSL_GUARDED_BY(mu_);
  // Map nodes of ranges removed, for ranges added later: every operation
  // allocates and frees scratch memory, and should not allocate heap memory
  // to do so.
  std::vector<Ranges::node_type> spare_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SESSION_SCRATCH_ARENA_H_
