// The two tools a server uses to take back heap: HeapMap, which 64-byte
// units of the heap something names, and PoolBuilder, which carves the
// units nothing names into blocks and hands them to the free pool, a node
// at a time. A reconfiguration (replica_takeover.h) builds the pool anew
// while nobody can reach the region; the heap census (heap_reclaim.h)
// pushes onto the pool clients use.
#ifndef RKV_SERVER_KVSERVER_HEAP_MAP_H_
#define RKV_SERVER_KVSERVER_HEAP_MAP_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/layout/region_format.h"

namespace rkv::server {

// A bit per 64-byte unit: bounded memory (1/512 of the heap) however many
// blocks there are, and blocks that overlap (a corrupt slot) are no harder
// than others.
class HeapMap {
 public:
  explicit HeapMap(uint64_t heap_bytes)
      : heap_bytes_(heap_bytes), bits_((heap_bytes / kUnit + 63) / 64) {}

  // A block at heap offset `at`; what lies outside the heap is ignored.
  void Mark(uint64_t at, uint64_t bytes);
  // Past the last unit marked.
  uint64_t end() const { return end_; }
  // Calls f(begin, end), heap offsets, for every run of unmarked units
  // below `limit`.
  void ForEachGap(uint64_t limit, const std::function<void(uint64_t, uint64_t)>& f) const;

 private:
  static constexpr uint64_t kUnit = layout::kBlockAlign;
  static uint64_t Bit(uint64_t u) { return uint64_t{1} << (u % 64); }
  // The first unit from `u` (below `units`) not `marked`, a word at a time
  // where it can.
  uint64_t Skip(uint64_t u, uint64_t units, bool marked) const;

  uint64_t heap_bytes_;
  std::vector<uint64_t> bits_;
  uint64_t end_ = 0;
};

// Carves free heap into blocks of the classes `named_bytes` (bytes by size
// class that the index names) weighs most, each class getting its share of
// the free bytes (a pool of one class serves no other), the rest in the
// largest class that fits; fills nodes and hands each, full, to the sink,
// so that memory stays bounded however much is free.
class PoolBuilder {
 public:
  // Puts a node (in block `node` of `size_class`, listing `contents.blocks`)
  // on the class's stack; sets contents.next itself.
  using NodeSink =
      std::function<absl::Status(uint8_t size_class, uint64_t node, layout::FreeNode& contents)>;

  PoolBuilder(const std::array<uint64_t, 256>& named_bytes, NodeSink sink);

  // Frees [begin, end), region offsets aligned to kBlockAlign.
  absl::Status AddGap(uint64_t begin, uint64_t end);
  // Hands over the nodes still filling; returns the bytes pooled.
  absl::StatusOr<uint64_t> Finish();

 private:
  struct OpenNode {
    uint64_t node = 0;  // The block that holds the node; 0: none yet.
    layout::FreeNode contents;
  };
  absl::Status Add(uint8_t c, uint64_t block);
  absl::Status Flush(uint8_t c);

  struct Share {
    uint8_t size_class;
    double share;  // Of the named bytes.
  };
  NodeSink sink_;
  std::vector<Share> shares_;
  std::array<uint64_t, 256> pooled_by_class_{};
  std::array<OpenNode, 256> open_;
  uint64_t pooled_ = 0;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_HEAP_MAP_H_
