// What an operation needs from the client that runs it: the region's
// layout and keys, local scratch memory, the heap allocator, the slot
// cache and the clock.
#ifndef RKV_CLIENT_SESSION_SESSION_H_
#define RKV_CLIENT_SESSION_SESSION_H_

#include <cstdint>

#include "absl/time/time.h"
#include "client/session/broken_protocol.h"
#include "client/session/heap_allocator.h"
#include "client/session/scratch_arena.h"
#include "client/session/slot_cache.h"
#include "common/layout/region_format.h"
#include "common/random.h"
#include "rkv/client.h"

namespace rkv::client_internal {

// The most copies a region may have.
inline constexpr int kMaxReplicas = 8;

class Session {
 public:
  virtual ~Session() = default;
  virtual const layout::Layout& layout() const = 0;
  virtual const ClientOptions& options() const = 0;
  virtual const BrokenProtocol& broken() const = 0;
  virtual absl::Time Now() const = 0;
  // The copies of the region an operation reaches, the primary first:
  // mirrored regions of one geometry, where an offset names the same slot
  // or block in each. 1 for a region that is not replicated.
  virtual int replicas() const = 0;
  // The remote address of a region offset in a replica, and its rkey.
  virtual uint64_t Remote(int replica, uint64_t region_offset) const = 0;
  virtual uint32_t rkey(int replica) const = 0;
  // Names the region this session reaches, unique in the process: the
  // slot cache's entries belong to one region each.
  virtual uint64_t region_id() const = 0;
  virtual uint32_t lkey() const = 0;
  virtual ScratchArena& scratch() = 0;
  virtual HeapAllocator& heap() = 0;
  virtual SlotCache& cache() = 0;
  // Spreads claims over free slots, so that clients inserting different
  // keys into one bucket rarely race for the same slot.
  virtual Rng& rng() = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SESSION_SESSION_H_
