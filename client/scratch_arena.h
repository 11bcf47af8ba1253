// Registered local memory that operations borrow for their requests'
// buffers: bucket reads, CAS results, blocks to write and read.
#ifndef RKV_CLIENT_SCRATCH_ARENA_H_
#define RKV_CLIENT_SCRATCH_ARENA_H_

#include <cstdint>
#include <map>

namespace rkv::client_internal {

// First-fit allocator over [base, base + size) in 64-byte units. Not
// thread-safe: a client is used by one thread.
class ScratchArena {
 public:
  ScratchArena(uint8_t* base, uint64_t size);
  // nullptr when no free range is large enough.
  uint8_t* Allocate(uint64_t bytes);
  void Free(uint8_t* p);
  uint64_t size() const { return size_; }
  // Nothing is allocated.
  bool empty() const { return allocated_.empty(); }

 private:
  uint8_t* const base_;
  const uint64_t size_;
  std::map<uint64_t, uint64_t> free_;       // offset -> length
  std::map<uint64_t, uint64_t> allocated_;  // offset -> length
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SCRATCH_ARENA_H_
