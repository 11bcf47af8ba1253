#include "server/replica_takeover.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

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

// The heap a copy's slots leave unnamed, handed to the free pool: below
// the last named block, every gap between named blocks, carved into blocks
// of the classes most named (the workload's) and then of the largest class
// that fits the rest. Nodes are written as they fill, so memory stays
// bounded however much is free. Every copy gets the same pool.
class PoolBuilder {
 public:
  PoolBuilder(absl::Span<uint8_t* const> copies, const std::array<uint64_t, 256>& named_count)
      : copies_(copies) {
    for (int c = 1; c < 256; ++c) {
      if (named_count[c] > 0) by_use_.push_back(static_cast<uint8_t>(c));
    }
    std::stable_sort(by_use_.begin(), by_use_.end(),
                     [&](uint8_t a, uint8_t b) { return named_count[a] > named_count[b]; });
    for (uint8_t* copy : copies_) {
      for (int c = 1; c < 256; ++c) {
        Store(copy, layout::FreePoolHeadOffset(static_cast<uint8_t>(c)), 0);
      }
    }
  }

  // Frees [begin, end), region offsets aligned to kBlockAlign.
  void AddGap(uint64_t begin, uint64_t end) {
    for (uint8_t c : by_use_) {
      for (const uint64_t bytes = layout::ClassBytes(c); end - begin >= bytes; begin += bytes) {
        Add(c, begin);
      }
    }
    for (int c = 255; c >= 1 && begin < end; --c) {
      for (const uint64_t bytes = layout::ClassBytes(static_cast<uint8_t>(c)); end - begin >= bytes;
           begin += bytes) {
        Add(static_cast<uint8_t>(c), begin);
      }
    }
  }

  // Writes the nodes still filling; returns the bytes pooled.
  uint64_t Finish() {
    for (int c = 1; c < 256; ++c) {
      if (open_[c].node != 0) Flush(static_cast<uint8_t>(c));
    }
    return pooled_;
  }

 private:
  struct OpenNode {
    uint64_t node = 0;  // The block that holds the node; 0: none yet.
    layout::FreeNode contents;
  };

  void Add(uint8_t c, uint64_t block) {
    pooled_ += layout::ClassBytes(c);
    OpenNode& n = open_[c];
    if (n.node == 0) {
      n.node = block;  // A node is itself a free block of its class.
      return;
    }
    n.contents.blocks.push_back(block);
    if (n.contents.blocks.size() == layout::FreeNodeCapacity(c)) Flush(c);
  }

  // Pushes the open node of class `c` onto its stack, on every copy.
  void Flush(uint8_t c) {
    OpenNode& n = open_[c];
    const uint64_t head_at = layout::FreePoolHeadOffset(c);
    n.contents.next = layout::FreePoolHead::Decode(Load(copies_[0], head_at)).node;
    buffer_.resize(layout::FreeNodeBytes(c));
    layout::EncodeFreeNode(n.contents, c, buffer_.data());
    for (uint8_t* copy : copies_) {
      std::memcpy(copy + n.node, buffer_.data(), buffer_.size());
      Store(copy, head_at, layout::FreePoolHead{.tag = 0, .node = n.node}.Encode());
    }
    n = {};
  }

  absl::Span<uint8_t* const> copies_;
  std::vector<uint8_t> by_use_;  // Classes named by slots, most named first.
  std::array<OpenNode, 256> open_;
  std::vector<uint8_t> buffer_;
  uint64_t pooled_ = 0;
};

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
  std::vector<std::pair<uint64_t, uint64_t>> named;  // Blocks a slot names: offset, bytes.
  std::array<uint64_t, 256> named_count{};           // By class.
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
        named.emplace_back(s.offset, bytes);
        named_count[s.size_class]++;
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
  std::sort(named.begin(), named.end());
  PoolBuilder pool(copies, named_count);
  uint64_t end = layout.heap_offset;  // Past the named blocks so far.
  for (const auto& [offset, bytes] : named) {
    if (offset > end) pool.AddGap(end, offset);
    end = std::max(end, offset + bytes);
  }
  stats.pooled_bytes = pool.Finish();
  stats.heap_cursor = end - layout.heap_offset;
  for (uint8_t* copy : copies) Store(copy, layout::HeaderOffsets::kHeapCursor, stats.heap_cursor);
  return stats;
}

}  // namespace rkv::server
