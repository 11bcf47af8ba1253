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
  uint64_t budget = max_nodes;
  for (int c = 1; c < 256; ++c) {
    const auto size_class = static_cast<uint8_t>(c);
    const uint64_t block = layout::ClassBytes(size_class);
    if (!WalkFreePool(memory, layout, size_class, &budget,
                      [&](uint64_t, const layout::FreeNode& node) {
                        census.pooled_bytes += block * (1 + node.blocks.size());
                      })) {
      census.pool_partial = true;
    }
  }
  census.cursor = std::min(Load(memory, layout::HeaderOffsets::kHeapCursor), layout.heap_bytes);
  return census;
}

bool WalkFreePool(const uint8_t* memory, const layout::Layout& layout, uint8_t size_class,
                  uint64_t* budget,
                  absl::FunctionRef<void(uint64_t node, const layout::FreeNode&)> f) {
  const uint64_t node_bytes = layout::FreeNodeBytes(size_class);
  std::vector<uint8_t> buffer(node_bytes);
  // Acquire: the head's CAS comes after the WRITE of the node it names.
  const uint64_t head =
      std::atomic_ref<const uint64_t>(
          *reinterpret_cast<const uint64_t*>(memory + layout::FreePoolHeadOffset(size_class)))
          .load(std::memory_order_acquire);
  uint64_t node = layout::FreePoolHead::Decode(head).node;
  for (; node != 0; --*budget) {
    if (*budget == 0 || node < layout.heap_offset ||
        node + node_bytes > layout.heap_offset + layout.heap_bytes) {
      return false;
    }
    fabric::CopyFromShared(buffer.data(), memory + node, node_bytes);
    absl::StatusOr<layout::FreeNode> decoded = layout::DecodeFreeNode(
        absl::string_view(reinterpret_cast<const char*>(buffer.data()), node_bytes), size_class,
        layout);
    if (!decoded.ok()) return false;
    f(node, *decoded);
    node = decoded->next;
  }
  return true;
}

}  // namespace rkv::server
