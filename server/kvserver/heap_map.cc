#include "server/kvserver/heap_map.h"

namespace rkv::server {

void HeapMap::Mark(uint64_t at, uint64_t bytes) {
  if (at >= heap_bytes_) return;
  const uint64_t end = std::min(heap_bytes_, at + bytes);
  for (uint64_t u = at / kUnit; u < (end + kUnit - 1) / kUnit; ++u) bits_[u / 64] |= Bit(u);
  end_ = std::max(end_, (end + kUnit - 1) / kUnit * kUnit);
}

void HeapMap::ForEachGap(uint64_t limit, const std::function<void(uint64_t, uint64_t)>& f) const {
  const uint64_t units = std::min(limit, heap_bytes_) / kUnit;
  uint64_t u = 0;
  while (u < units) {
    u = Skip(u, units, /*marked=*/true);
    const uint64_t start = u;
    u = Skip(u, units, /*marked=*/false);
    if (u > start) f(start * kUnit, u * kUnit);
  }
}

uint64_t HeapMap::Skip(uint64_t u, uint64_t units, bool marked) const {
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

PoolBuilder::PoolBuilder(const std::array<uint64_t, 256>& named_bytes, NodeSink sink)
    : sink_(std::move(sink)) {
  uint64_t total = 0;
  for (uint64_t b : named_bytes) total += b;
  for (int c = 1; c < 256; ++c) {
    if (named_bytes[c] == 0) continue;
    shares_.push_back({static_cast<uint8_t>(c), double(named_bytes[c]) / double(total)});
  }
}

absl::Status PoolBuilder::AddGap(uint64_t begin, uint64_t end) {
  while (begin < end) {
    // The class furthest below its share that fits.
    uint8_t pick = 0;
    double most_behind = 0;
    for (const Share& s : shares_) {
      const double behind = s.share * double(pooled_) - double(pooled_by_class_[s.size_class]);
      // Ties go to the larger class (shares_ is by class).
      if (layout::ClassBytes(s.size_class) <= end - begin && (pick == 0 || behind >= most_behind)) {
        pick = s.size_class;
        most_behind = behind;
      }
    }
    for (int c = 255; pick == 0; --c) {
      if (layout::ClassBytes(static_cast<uint8_t>(c)) <= end - begin) {
        pick = static_cast<uint8_t>(c);
      }
    }
    if (absl::Status s = Add(pick, begin); !s.ok()) return s;
    begin += layout::ClassBytes(pick);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PoolBuilder::Finish() {
  for (int c = 1; c < 256; ++c) {
    if (open_[c].node == 0) continue;
    if (absl::Status s = Flush(static_cast<uint8_t>(c)); !s.ok()) return s;
  }
  return pooled_;
}

absl::Status PoolBuilder::Add(uint8_t c, uint64_t block) {
  pooled_ += layout::ClassBytes(c);
  pooled_by_class_[c] += layout::ClassBytes(c);
  OpenNode& n = open_[c];
  if (n.node == 0) {
    n.node = block;  // A node is itself a free block of its class.
    return absl::OkStatus();
  }
  n.contents.blocks.push_back(block);
  if (n.contents.blocks.size() == layout::FreeNodeCapacity(c)) return Flush(c);
  return absl::OkStatus();
}

absl::Status PoolBuilder::Flush(uint8_t c) {
  OpenNode& n = open_[c];
  absl::Status s = sink_(c, n.node, n.contents);
  n = {};
  return s;
}

}  // namespace rkv::server
