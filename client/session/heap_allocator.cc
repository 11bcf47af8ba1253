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

bool HeapAllocator::AddChunk(uint64_t old_cursor, uint64_t bytes, absl::Time now) {
  if (old_cursor > layout_.heap_bytes || bytes > layout_.heap_bytes - old_cursor) return false;
  const uint64_t start = layout_.heap_offset + old_cursor;
  // Ends of chunks too small for the class in use would pile up here: they
  // become blocks of the classes that fit them instead, reused by writes of
  // those classes or handed back at close with the rest.
  const uint64_t useful = last_class_ ? layout::ClassBytes(last_class_) : layout::kBlockAlign;
  std::erase_if(chunks_, [this, useful, now](const Chunk& c) {
    if (c.end - c.next >= useful) return false;
    KeepAsBlocks(c.next, c.end, now);
    return true;
  });
  chunks_.push_back({start, start + bytes});
  if (tracking_) layout::AppendReportRange(start, start + bytes, &tracked_);
  return true;
}

void HeapAllocator::KeepAsBlocks(uint64_t begin, uint64_t end, absl::Time now) {
  while (end - begin >= layout::kBlockAlign) {
    uint8_t c = layout::ClassFor(end - begin);
    if (c == 0) c = 255;
    while (layout::ClassBytes(c) > end - begin) --c;
    FreeUnpublished(begin, c, now);
    begin += layout::ClassBytes(c);
  }
}

void HeapAllocator::Free(uint64_t offset, uint8_t size_class, absl::Time unlinked_at) {
  free_[size_class].push_back({offset, unlinked_at + grace_});
  if (tracking_) tracked_.push_back(layout::ReportBlock(size_class, offset));
}

void HeapAllocator::PushFront(uint8_t size_class, uint64_t offset, absl::Time now) {
  RingDeque<Freed>& list = free_[size_class];
  // Reusable now, and no later than the block behind it: a list's times
  // never fall, which TakeStale and TakeFree rely on.
  list.push_front({offset, list.empty() ? now : std::min(now, list.front().reusable_at)});
}

void HeapAllocator::FreeUnpublished(uint64_t offset, uint8_t size_class, absl::Time now) {
  PushFront(size_class, offset, now);
}

void HeapAllocator::AddRecycled(uint8_t size_class, absl::Span<const uint64_t> blocks,
                                absl::Time now) {
  for (uint64_t b : blocks) {
    PushFront(size_class, b, now);
    if (tracking_) tracked_.push_back(layout::ReportBlock(size_class, b));
  }
}

uint8_t HeapAllocator::TakeStale(absl::Time now, absl::Duration linger,
                                 std::vector<uint64_t>* out) {
  const absl::Time stale_by = now - grace_;
  for (int i = 0; i < 255; ++i) {
    const auto c = static_cast<uint8_t>((stale_scan_ - 1 + i) % 255 + 1);
    RingDeque<Freed>& list = free_[c];
    if (list.empty() || list.front().reusable_at > stale_by) continue;
    const size_t limit = layout::FreeNodeCapacity(c) + 1;
    size_t stale = 0;
    while (stale < list.size() && stale < limit && list[stale].reusable_at <= stale_by) ++stale;
    if (stale < limit && list.front().reusable_at > stale_by - linger) continue;
    stale_scan_ = static_cast<uint8_t>(c % 255 + 1);
    for (size_t k = 0; k < stale; ++k) {
      out->push_back(list.front().offset);
      list.pop_front();
    }
    return c;
  }
  return 0;
}

void HeapAllocator::TakeFree(absl::Time before, std::array<std::vector<uint64_t>, 256>* out) {
  if (last_class_ != 0) {
    const uint64_t bytes = layout::ClassBytes(last_class_);
    for (Chunk& c : chunks_) {
      for (; c.end - c.next >= bytes; c.next += bytes) (*out)[last_class_].push_back(c.next);
    }
  }
  for (const Chunk& c : chunks_) KeepAsBlocks(c.next, c.end, before);
  chunks_.clear();
  for (int c = 0; c < 256; ++c) {
    RingDeque<Freed>& list = free_[c];
    // Reusable times never fall along a list.
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

void HeapAllocator::Holdings(std::vector<uint64_t>* out) const {
  for (const Chunk& c : chunks_) layout::AppendReportRange(c.next, c.end, out);
  for (int c = 1; c < 256; ++c) {
    const RingDeque<Freed>& list = free_[c];
    for (size_t i = 0; i < list.size(); ++i) {
      out->push_back(layout::ReportBlock(static_cast<uint8_t>(c), list[i].offset));
    }
  }
}

void HeapAllocator::StartTracking() {
  tracked_.clear();
  tracking_ = true;
}

void HeapAllocator::StopTracking() {
  tracking_ = false;
  tracked_.clear();
}

}  // namespace rkv::client_internal
