#include "client/heap_allocator.h"

#include <algorithm>

namespace rkv::client_internal {

HeapAllocator::HeapAllocator(const layout::Layout& layout, uint64_t chunk_bytes,
                             absl::Duration grace)
    : layout_(layout),
      // Small regions get small chunks, so that many clients fit.
      chunk_bytes_(std::max<uint64_t>(4096, std::min(chunk_bytes, layout.heap_bytes / 32)) / 64 *
                   64),
      grace_(grace) {}

uint64_t HeapAllocator::Allocate(uint8_t size_class, absl::Time now) {
  std::deque<Freed>& list = free_[size_class];
  if (!list.empty() && list.front().reusable_at <= now) {
    const uint64_t off = list.front().offset;
    list.pop_front();
    return off;
  }
  const uint64_t bytes = layout::ClassBytes(size_class);
  if (chunk_end_ - chunk_next_ >= bytes) {
    const uint64_t off = chunk_next_;
    chunk_next_ += bytes;
    return off;
  }
  return 0;
}

uint64_t HeapAllocator::ChunkRequestBytes(uint8_t size_class) const {
  return std::max(chunk_bytes_, layout::ClassBytes(size_class));
}

bool HeapAllocator::AddChunk(uint64_t old_cursor, uint64_t bytes) {
  if (old_cursor > layout_.heap_bytes || bytes > layout_.heap_bytes - old_cursor) return false;
  // The rest of the previous chunk is abandoned: blocks never straddle.
  chunk_next_ = layout_.heap_offset + old_cursor;
  chunk_end_ = chunk_next_ + bytes;
  return true;
}

void HeapAllocator::Free(uint64_t offset, uint8_t size_class, absl::Time unlinked_at) {
  free_[size_class].push_back({offset, unlinked_at + grace_});
}

void HeapAllocator::FreeUnpublished(uint64_t offset, uint8_t size_class) {
  free_[size_class].push_front({offset, absl::InfinitePast()});
}

}  // namespace rkv::client_internal
