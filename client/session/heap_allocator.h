// Client-side allocation of KV blocks in a server's heap. Chunks come from
// the server with one FAA on the region's heap cursor; blocks are carved
// from them by size class. When the cursor has run out, blocks come from
// the region's free pool, where closing clients leave theirs. A freed block waits out the grace
// period before reuse, so that no reader that could still trust it sees it
// change.
#ifndef RKV_CLIENT_SESSION_HEAP_ALLOCATOR_H_
#define RKV_CLIENT_SESSION_HEAP_ALLOCATOR_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/session/ring_deque.h"
#include "common/layout/region_format.h"

namespace rkv::client_internal {

class HeapAllocator {
 public:
  HeapAllocator(const layout::Layout& layout, uint64_t chunk_bytes, absl::Duration grace);

  // A block of `size_class`, as a region offset; 0 when a new chunk is
  // needed first (see ChunkRequestBytes / AddChunk).
  uint64_t Allocate(uint8_t size_class, absl::Time now);
  // Bytes to FAA from the heap cursor so that Allocate(size_class) succeeds.
  uint64_t ChunkRequestBytes(uint8_t size_class) const;
  // Records the FAA's result (the cursor value before it), at `now`. False
  // when the heap cannot hold the chunk.
  bool AddChunk(uint64_t old_cursor, uint64_t bytes, absl::Time now);
  // Returns a block; reusable from `unlinked_at + grace`.
  void Free(uint64_t offset, uint8_t size_class, absl::Time unlinked_at);
  // Returns a block nobody has ever seen (never published): reusable now.
  void FreeUnpublished(uint64_t offset, uint8_t size_class, absl::Time now);
  // Blocks taken from the region's free pool: reusable now.
  void AddRecycled(uint8_t size_class, absl::Span<const uint64_t> blocks, absl::Time now);

  // Blocks of one class that have been reusable for a grace period without
  // being reused (a client that frees more of a class than it writes), for
  // the region's free pool: a pool node's worth of them (the node and the
  // blocks it lists), or fewer once the oldest has waited `linger` more.
  // Returns their class, 0 when no class has such. What a live client
  // keeps out of the pool is so bounded: what it freed in its last two
  // grace periods, plus per class less than a node's worth for at most
  // `linger` longer, plus the rest of its chunks.
  uint8_t TakeStale(absl::Time now, absl::Duration linger, std::vector<uint64_t>* out);

  // Empties the allocator for handing its blocks back to the region when
  // the client closes: the free lists, and the rest of its chunks cut into
  // blocks of the class last allocated (their ends into blocks of the
  // classes that fit them). Blocks reusable by `before` go into `out` by
  // class; the rest stay.
  void TakeFree(absl::Time before, std::array<std::vector<uint64_t>, 256>* out);
  // When every block on the free lists is reusable.
  absl::Time AllReusableAt() const;

  // For the server's heap census (common/layout/region_format.h): what
  // the allocator holds, as report words (its free lists, and its chunks'
  // rest as ranges).
  void Holdings(std::vector<uint64_t>* out) const;
  // From now on, records as report words every block it frees and every
  // block and range it takes in, until StopTracking.
  void StartTracking();
  bool tracking() const { return tracking_; }
  // Appends what it recorded, from its `from`th word on, to `out`; returns
  // how many words it recorded in all.
  size_t Tracked(std::vector<uint64_t>* out, size_t from) const {
    from = std::min(from, tracked_.size());
    out->insert(out->end(), tracked_.begin() + static_cast<std::ptrdiff_t>(from), tracked_.end());
    return tracked_.size();
  }
  void StopTracking();

 private:
  // [begin, end), never published, as blocks of the largest classes that
  // fit, on the free lists, reusable from `now`.
  void KeepAsBlocks(uint64_t begin, uint64_t end, absl::Time now);
  // A block reusable at once, at the front of its list.
  void PushFront(uint8_t size_class, uint64_t offset, absl::Time now);

  // A list holds the blocks never published (and those from the pool) at
  // its front, then the freed ones, by the time each becomes reusable: the
  // times never fall along a list.
  struct Freed {
    uint64_t offset = 0;
    absl::Time reusable_at;
  };
  const layout::Layout layout_;
  const uint64_t chunk_bytes_;
  const absl::Duration grace_;
  struct Chunk {
    uint64_t next;  // Region offsets.
    uint64_t end;
  };
  // Chunks with room left. Operations in flight together may each take a
  // chunk; every one is used, not just the last.
  std::vector<Chunk> chunks_;
  uint8_t last_class_ = 0;
  // By size class; a ring, as every write frees one block and takes one.
  std::array<RingDeque<Freed>, 256> free_;
  uint8_t stale_scan_ = 1;  // Where TakeStale's next scan of the classes starts.
  bool tracking_ = false;
  std::vector<uint64_t> tracked_;  // Report words, while tracking_.
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SESSION_HEAP_ALLOCATOR_H_
