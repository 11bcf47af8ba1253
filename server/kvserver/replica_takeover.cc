#include "server/kvserver/replica_takeover.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fabric/remote_op.h"
#include "common/status.h"
#include "server/kvserver/heap_map.h"

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
                                       const layout::Layout& layout) {
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
  HeapMap named(layout.heap_bytes);         // Blocks a slot names.
  std::array<uint64_t, 256> named_bytes{};  // By class.
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
      if (bytes == 0 || s.offset < layout.heap_offset || s.offset % layout::kBlockAlign != 0 ||
          s.offset + bytes > layout.heap_offset + layout.heap_bytes) {
        word = 0;  // Names no block of the heap: never a write's.
      } else {
        named.Mark(s.offset - layout.heap_offset, bytes);
        named_bytes[s.size_class] += bytes;
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
  // Nobody holds heap any more: the clients that had reserved chunks and
  // freed blocks are fenced off, and their sessions go with the
  // configuration. So the cursor goes back to the end of the last named
  // block, and everything unnamed below it goes to the free pool — what
  // clients had reserved and not used, what they had freed, the old pool,
  // blocks of writes that never took effect.
  for (uint8_t* copy : copies) {
    for (int c = 1; c < 256; ++c)
      Store(copy, layout::FreePoolHeadOffset(static_cast<uint8_t>(c)), 0);
  }
  std::vector<uint8_t> buffer;
  // Every copy gets the same pool.
  PoolBuilder pool(named_bytes, [&](uint8_t c, uint64_t node, layout::FreeNode& contents) {
    const uint64_t head_at = layout::FreePoolHeadOffset(c);
    contents.next = layout::FreePoolHead::Decode(Load(copies[0], head_at)).node;
    buffer.resize(layout::FreeNodeBytes(c));
    layout::EncodeFreeNode(contents, c, buffer.data());
    for (uint8_t* copy : copies) {
      // Word stores: the server's heap census may walk the pool meanwhile.
      fabric::CopyToShared(copy + node, buffer.data(), buffer.size());
      Store(copy, head_at, layout::FreePoolHead{.tag = 0, .node = node}.Encode());
    }
    return absl::OkStatus();
  });
  absl::Status added = absl::OkStatus();
  named.ForEachGap(named.end(), [&](uint64_t begin, uint64_t end) {
    if (added.ok()) added = pool.AddGap(layout.heap_offset + begin, layout.heap_offset + end);
  });
  RKV_RETURN_IF_ERROR(added);
  RKV_ASSIGN_OR_RETURN(stats.pooled_bytes, pool.Finish());
  stats.heap_cursor = named.end();
  for (uint8_t* copy : copies) Store(copy, layout::HeaderOffsets::kHeapCursor, stats.heap_cursor);
  return stats;
}

}  // namespace rkv::server
