#include "server/replica_takeover.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rkv::server {
namespace {

uint64_t Load(const uint8_t* memory, uint64_t offset) {
  return std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(memory + offset))
      .load(std::memory_order_relaxed);
}

void Store(uint8_t* memory, uint64_t offset, uint64_t word) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(memory + offset))
      .store(word, std::memory_order_relaxed);
}

}  // namespace

absl::StatusOr<TakeoverStats> TakeOver(absl::Span<uint8_t* const> copies,
                                       const layout::Layout& layout, bool keep_pool) {
  if (copies.empty()) return absl::InvalidArgumentError("no surviving copy");
  for (size_t r = 0; r < copies.size(); ++r) {
    const uint32_t n = layout::HeaderOffsets::kChecksum + 4;
    absl::StatusOr<layout::Layout> l = layout::ParseHeader(
        absl::string_view(reinterpret_cast<const char*>(copies[r]), n), layout.region_bytes);
    if (!l.ok()) return l.status();
    if (!layout::SameGeometry(*l, layout)) {
      return absl::InvalidArgumentError(absl::StrCat("copy ", r, " has another geometry"));
    }
  }
  TakeoverStats stats;
  uint64_t heap_end = 0;  // Past the last block a slot names, from the heap's start.
  uint8_t* const primary = copies[0];
  layout::ForEachSlot(layout, [&](uint64_t offset) {
    uint64_t word = Load(primary, offset);
    // An intent (on a copy that was primary) takes effect: it is a decided
    // write. A tombstone, a delete intent's trace on a backup, empties the
    // slot; anything else (a claim not yet decided) was never a write.
    if (layout::IsIntent(word)) {
      word = layout::IntentTarget(word);
    } else if (!layout::IsCommitted(word)) {
      word = 0;
    }
    if (word != 0) {
      const layout::Slot s = layout::Slot::Decode(word);
      const uint64_t bytes = layout::ClassBytes(s.size_class);
      if (bytes == 0 || s.offset < layout.heap_offset ||
          s.offset + bytes > layout.heap_offset + layout.heap_bytes) {
        word = 0;  // Names no block of the heap: never a write's.
      } else {
        heap_end = std::max(heap_end, s.offset + bytes - layout.heap_offset);
        for (size_t r = 1; r < copies.size(); ++r) {
          if (std::memcmp(copies[r] + s.offset, primary + s.offset, bytes) != 0) {
            std::memcpy(copies[r] + s.offset, primary + s.offset, bytes);
            stats.blocks_copied++;
          }
        }
      }
    }
    for (uint8_t* copy : copies) {
      if (Load(copy, offset) != word) {
        Store(copy, offset, word);
        stats.slots_changed++;
      }
    }
  });
  // The cursor never goes back (a copy's own is at most the primary's);
  // the free pool is kept only where it is the serving primary's own.
  stats.heap_cursor = std::max(Load(primary, layout::HeaderOffsets::kHeapCursor),
                               (heap_end + layout::kBlockAlign - 1) / layout::kBlockAlign *
                                   layout::kBlockAlign);
  for (uint8_t* copy : copies) {
    Store(copy, layout::HeaderOffsets::kHeapCursor, stats.heap_cursor);
    for (int c = 1; c < 256; ++c) {
      const uint64_t head = layout::FreePoolHeadOffset(static_cast<uint8_t>(c));
      Store(copy, head, keep_pool ? Load(primary, head) : 0);
    }
  }
  return stats;
}

}  // namespace rkv::server
