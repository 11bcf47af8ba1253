#include "server/kvserver/heap_census.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "common/fabric/remote_op.h"

namespace rkv::server {
namespace {

// Peers change these words concurrently: read them as the NIC does.
uint64_t Load(const uint8_t* memory, uint64_t offset) {
  return std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(memory + offset))
      .load(std::memory_order_relaxed);
}

// Bytes in the free pool of `size_class`, walking at most `*budget` nodes
// (less what it walked); false in `*whole` if it stopped short.
uint64_t PooledBytes(const uint8_t* memory, const layout::Layout& layout, uint8_t size_class,
                     uint64_t* budget, bool* whole, std::vector<uint8_t>& buffer) {
  const uint64_t block = layout::ClassBytes(size_class);
  const uint64_t node_bytes = layout::FreeNodeBytes(size_class);
  buffer.resize(node_bytes);
  uint64_t bytes = 0;
  uint64_t node =
      layout::FreePoolHead::Decode(Load(memory, layout::FreePoolHeadOffset(size_class))).node;
  for (; node != 0; --*budget) {
    if (*budget == 0 || node < layout.heap_offset ||
        node + node_bytes > layout.heap_offset + layout.heap_bytes) {
      *whole = false;
      break;
    }
    fabric::CopyFromShared(buffer.data(), memory + node, node_bytes);
    absl::StatusOr<layout::FreeNode> decoded = layout::DecodeFreeNode(
        absl::string_view(reinterpret_cast<const char*>(buffer.data()), node_bytes), size_class,
        layout);
    if (!decoded.ok()) {  // Popped and reused while we read it.
      *whole = false;
      break;
    }
    bytes += block * (1 + decoded->blocks.size());
    node = decoded->next;
  }
  return bytes;
}

}  // namespace

HeapCensus CountHeap(const uint8_t* memory, const layout::Layout& layout, uint64_t max_nodes) {
  HeapCensus census;
  layout::ForEachSlot(layout, [&](uint64_t offset) {
    uint64_t word = Load(memory, offset);
    if (layout::IsIntent(word)) word = layout::IntentTarget(word);
    if (!layout::IsCommitted(word)) return;
    census.slots_used++;
    census.live_bytes += layout::ClassBytes(layout::Slot::Decode(word).size_class);
  });
  std::vector<uint8_t> buffer;
  uint64_t budget = max_nodes;
  bool whole = true;
  for (int c = 1; c < 256; ++c) {
    census.pooled_bytes +=
        PooledBytes(memory, layout, static_cast<uint8_t>(c), &budget, &whole, buffer);
  }
  census.pool_partial = !whole;
  census.cursor = std::min(Load(memory, layout::HeaderOffsets::kHeapCursor), layout.heap_bytes);
  return census;
}

}  // namespace rkv::server
