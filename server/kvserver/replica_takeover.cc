#include "server/kvserver/replica_takeover.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fabric/remote_op.h"

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

// The heap a copy's slots leave unnamed, handed to the free pool: every
// gap between named blocks below the last one, carved into blocks of the
// classes the slots name, each class getting its share of the free bytes
// as of the named ones (a pool of one class serves no other), and the
// rest in the largest class that fits. Nodes are written as they fill, so
// memory stays bounded however much is free. Every copy gets the same pool.
class PoolBuilder {
 public:
  PoolBuilder(absl::Span<uint8_t* const> copies, const std::array<uint64_t, 256>& named_bytes)
      : copies_(copies) {
    uint64_t total = 0;
    for (uint64_t b : named_bytes) total += b;
    for (int c = 1; c < 256; ++c) {
      if (named_bytes[c] == 0) continue;
      shares_.push_back({static_cast<uint8_t>(c), double(named_bytes[c]) / double(total)});
    }
    for (uint8_t* copy : copies_) {
      for (int c = 1; c < 256; ++c) {
        Store(copy, layout::FreePoolHeadOffset(static_cast<uint8_t>(c)), 0);
      }
    }
  }

  // Frees [begin, end), region offsets aligned to kBlockAlign.
  void AddGap(uint64_t begin, uint64_t end) {
    while (begin < end) {
      // The class furthest below its share that fits.
      uint8_t pick = 0;
      double most_behind = 0;
      for (const Share& s : shares_) {
        const double behind = s.share * double(pooled_) - double(pooled_by_class_[s.size_class]);
        // Ties go to the larger class (shares_ is by class).
        if (layout::ClassBytes(s.size_class) <= end - begin &&
            (pick == 0 || behind >= most_behind)) {
          pick = s.size_class;
          most_behind = behind;
        }
      }
      for (int c = 255; pick == 0; --c) {
        if (layout::ClassBytes(static_cast<uint8_t>(c)) <= end - begin)
          pick = static_cast<uint8_t>(c);
      }
      Add(pick, begin);
      begin += layout::ClassBytes(pick);
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
    pooled_by_class_[c] += layout::ClassBytes(c);
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
      // Word stores: the server's heap census may walk the pool meanwhile.
      fabric::CopyToShared(copy + n.node, buffer_.data(), buffer_.size());
      Store(copy, head_at, layout::FreePoolHead{.tag = 0, .node = n.node}.Encode());
    }
    n = {};
  }

  struct Share {
    uint8_t size_class;
    double share;  // Of the named bytes.
  };
  absl::Span<uint8_t* const> copies_;
  std::vector<Share> shares_;
  std::array<uint64_t, 256> pooled_by_class_{};
  std::array<OpenNode, 256> open_;
  std::vector<uint8_t> buffer_;
  uint64_t pooled_ = 0;
};

// Which 64-byte units of the heap named blocks cover, a bit each: bounded
// memory (1/512 of the heap) however many blocks there are, and blocks
// that overlap (a corrupt slot) are no harder than others.
class HeapMap {
 public:
  explicit HeapMap(uint64_t heap_bytes) : bits_((heap_bytes / kUnit + 63) / 64) {}

  // A block at heap offset `at`.
  void Mark(uint64_t at, uint64_t bytes) {
    for (uint64_t u = at / kUnit; u < (at + bytes) / kUnit; ++u) bits_[u / 64] |= Bit(u);
    end_ = std::max(end_, at + bytes);
  }
  // Past the last block marked.
  uint64_t end() const { return end_; }
  // Calls f(begin, end), heap offsets, for every run of unmarked units
  // below end().
  template <typename F>
  void ForEachGap(F f) const {
    const uint64_t units = end_ / kUnit;
    uint64_t u = 0;
    while (u < units) {
      u = Skip(u, units, /*marked=*/true);
      const uint64_t start = u;
      u = Skip(u, units, /*marked=*/false);
      if (u > start) f(start * kUnit, u * kUnit);
    }
  }

 private:
  static constexpr uint64_t kUnit = layout::kBlockAlign;
  static uint64_t Bit(uint64_t u) { return uint64_t{1} << (u % 64); }
  // The first unit from `u` (below `units`) not `marked`, a word at a time
  // where it can.
  uint64_t Skip(uint64_t u, uint64_t units, bool marked) const {
    const uint64_t all = marked ? ~uint64_t{0} : 0;
    while (u < units) {
      if (u % 64 == 0 && bits_[u / 64] == all) {
        u += 64;
      } else if (((bits_[u / 64] & Bit(u)) != 0) == marked) {
        ++u;
      } else {
        break;
      }
    }
    return std::min(u, units);
  }

  std::vector<uint64_t> bits_;
  uint64_t end_ = 0;
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
  PoolBuilder pool(copies, named_bytes);
  named.ForEachGap([&](uint64_t begin, uint64_t end) {
    pool.AddGap(layout.heap_offset + begin, layout.heap_offset + end);
  });
  stats.pooled_bytes = pool.Finish();
  stats.heap_cursor = named.end();
  for (uint8_t* copy : copies) Store(copy, layout::HeaderOffsets::kHeapCursor, stats.heap_cursor);
  return stats;
}

}  // namespace rkv::server
