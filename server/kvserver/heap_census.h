// Where a region's heap is, counted by the server's CPU from its own
// memory while clients change it: the blocks slots name, the free pool,
// and the rest of what clients took from the heap cursor (what they hold:
// chunks not yet carved, blocks freed and waiting out the grace period,
// blocks of writes in flight; or what crashed clients left behind). A
// control-plane figure for kvctl status, never exact under load: each part
// is read at its own moment.
#ifndef RKV_SERVER_KVSERVER_HEAP_CENSUS_H_
#define RKV_SERVER_KVSERVER_HEAP_CENSUS_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "common/layout/region_format.h"

namespace rkv::server {

struct HeapCensus {
  uint64_t slots_used = 0;    // Committed (or, on a primary, intended) words.
  uint64_t cursor = 0;        // Heap handed out by the cursor.
  uint64_t live_bytes = 0;    // Blocks those slots name (their classes' bytes).
  uint64_t pooled_bytes = 0;  // Blocks in the free pool.
  // The walk of the pool stopped short: pooled_bytes is a lower bound.
  bool pool_partial = false;
};

// Scans the index and walks the free pool of `memory`, a region of
// `layout`. The walk stops at a node that fails its checks (popped and
// reused meanwhile), and after `max_nodes` nodes in all, so that it costs
// a bounded time however the pool is made up: a figure for operators, not
// for allocation. What was handed out and is neither live nor pooled is
// what clients hold.
HeapCensus CountHeap(const uint8_t* memory, const layout::Layout& layout,
                     uint64_t max_nodes = uint64_t{1} << 16);

// Walks the free pool of `size_class` in `memory`, a region of `layout`
// that clients may change meanwhile (each node is copied out word by word),
// calling f(node offset, node) for each node, at most `*budget` of them
// (which it counts down). False when the walk stopped short: the budget
// ran out, or a node failed its checks (popped and reused meanwhile).
bool WalkFreePool(const uint8_t* memory, const layout::Layout& layout, uint8_t size_class,
                  uint64_t* budget,
                  absl::FunctionRef<void(uint64_t node, const layout::FreeNode&)> f);

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_HEAP_CENSUS_H_
