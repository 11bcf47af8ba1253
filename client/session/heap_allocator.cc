#include "client/session/heap_allocator.h"

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
  RingDeque<Freed>& list = free_[size_class];
  if (!list.empty() && list.front().reusable_at <= now) {
    const uint64_t off = list.front().offset;
    list.pop_front();
    return off;
  }
  const uint64_t bytes = layout::ClassBytes(size_class);
  last_class_ = size_class;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    Chunk& c = chunks_[i];
    if (c.end - c.next < bytes) continue;
    const uint64_t off = c.next;
    c.next += bytes;
    if (c.next == c.end) chunks_.erase(chunks_.begin() + i);
    return off;
  }
  return 0;
}

uint64_t HeapAllocator::ChunkRequestBytes(uint8_t size_class) const {
  return std::max(chunk_bytes_, layout::ClassBytes(size_class));
}

bool HeapAllocator::AddChunk(uint64_t old_cursor, uint64_t bytes) {
  if (old_cursor > layout_.heap_bytes || bytes > layout_.heap_bytes - old_cursor) return false;
  const uint64_t start = layout_.heap_offset + old_cursor;
  // Ends of chunks too small for the class in use would pile up here: they
  // become blocks of the classes that fit them instead, reused by writes of
  // those classes or handed back at close with the rest.
  const uint64_t useful = last_class_ ? layout::ClassBytes(last_class_) : layout::kBlockAlign;
  std::erase_if(chunks_, [this, useful](const Chunk& c) {
    if (c.end - c.next >= useful) return false;
    KeepAsBlocks(c.next, c.end);
    return true;
  });
  chunks_.push_back({start, start + bytes});
  return true;
}

void HeapAllocator::KeepAsBlocks(uint64_t begin, uint64_t end) {
  while (end - begin >= layout::kBlockAlign) {
    uint8_t c = layout::ClassFor(end - begin);
    if (c == 0) c = 255;
    while (layout::ClassBytes(c) > end - begin) --c;
    FreeUnpublished(begin, c);
    begin += layout::ClassBytes(c);
  }
}

void HeapAllocator::Free(uint64_t offset, uint8_t size_class, absl::Time unlinked_at) {
  free_[size_class].push_back({offset, unlinked_at + grace_});
}

void HeapAllocator::FreeUnpublished(uint64_t offset, uint8_t size_class) {
  free_[size_class].push_front({offset, absl::InfinitePast()});
}

void HeapAllocator::AddRecycled(uint8_t size_class, const std::vector<uint64_t>& blocks) {
  for (uint64_t b : blocks) free_[size_class].push_front({b, absl::InfinitePast()});
}

void HeapAllocator::TakeFree(absl::Time before, std::array<std::vector<uint64_t>, 256>* out) {
  if (last_class_ != 0) {
    const uint64_t bytes = layout::ClassBytes(last_class_);
    for (Chunk& c : chunks_) {
      for (; c.end - c.next >= bytes; c.next += bytes) (*out)[last_class_].push_back(c.next);
    }
  }
  for (const Chunk& c : chunks_) KeepAsBlocks(c.next, c.end);
  chunks_.clear();
  for (int c = 0; c < 256; ++c) {
    RingDeque<Freed>& list = free_[c];
    // Reusable times only grow along a list, after the never-published
    // blocks pushed at its front.
    while (!list.empty() && list.front().reusable_at <= before) {
      (*out)[c].push_back(list.front().offset);
      list.pop_front();
    }
  }
}

absl::Time HeapAllocator::AllReusableAt() const {
  absl::Time t = absl::InfinitePast();
  for (const auto& list : free_) {
    if (!list.empty()) t = std::max(t, list.back().reusable_at);
  }
  return t;
}

}  // namespace rkv::client_internal
