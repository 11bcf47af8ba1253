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

#include "common/layout/region_format.h"

namespace rkv::server {

struct HeapCensus {
  uint64_t slots_used = 0;    // Committed (or, on a primary, intended) words.
  uint64_t cursor = 0;        // Heap handed out by the cursor.
  uint64_t live_bytes = 0;    // Blocks those slots name (their classes' bytes).
  uint64_t pooled_bytes = 0;  // Blocks in the free pool.
  // Handed out and neither live nor pooled: what clients hold.
  uint64_t held_bytes() const {
    const uint64_t accounted = live_bytes + pooled_bytes;
    return cursor > accounted ? cursor - accounted : 0;
  }
};

// Scans the index and walks the free pool of `memory`, a region of
// `layout`. The pool walk stops at a node that fails its checks (popped
// and reused meanwhile) or after `max_nodes` nodes of one class, counting
// what it saw: a figure for operators, not for allocation.
HeapCensus CountHeap(const uint8_t* memory, const layout::Layout& layout,
                     uint64_t max_nodes = uint64_t{1} << 20);

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_HEAP_CENSUS_H_
