// The takeover of a replicated region whose primary is lost: before a
// surviving copy serves as the new primary, every surviving copy is made
// to hold what it holds. Runs on a server's CPU at a reconfiguration
// (control plane), while no client can reach the copies: requests of the
// old configuration must be refused by then (new rkeys), or a late one
// could undo what this settles.
#ifndef RKV_SERVER_KVSERVER_REPLICA_TAKEOVER_H_
#define RKV_SERVER_KVSERVER_REPLICA_TAKEOVER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/layout/region_format.h"

namespace rkv::server {

struct TakeoverStats {
  uint64_t slots_changed = 0;  // On any copy.
  uint64_t blocks_copied = 0;
  uint64_t heap_cursor = 0;   // Set on every copy.
  uint64_t pooled_bytes = 0;  // Heap below the cursor put in the free pool.
};

// copies[0] becomes the primary. Its slots decide: a backup's slot holds a
// committed word or zero (a tombstone, the trace of a delete, becomes zero),
// and every copy gets it, with the block it names. A committed word there
// may be a write whose outcome its writer never learnt (its intent died with
// the old primary, its word reached this copy): it takes effect now, as a
// write of unknown outcome may. copies[0] may also be the primary itself (a
// group reconfiguring around a lost backup): its intents take effect (each
// is a decided write).
//
// The heap is reclaimed: no client of the configuration that ends holds
// any of it once the copies are fenced. The heap cursor goes to the end of
// the last block a slot names, and every gap below it goes to the free
// pool, carved into blocks of the classes the slots name most (then of
// whatever class fits), the same on every copy. So a reconfiguration
// strands nothing: not the chunks clients had reserved, not the blocks
// they had freed or that writes never linked, not a backup's stale pool.
// InvalidArgument unless the copies share `layout`'s geometry.
absl::StatusOr<TakeoverStats> TakeOver(absl::Span<uint8_t* const> copies,
                                       const layout::Layout& layout);

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_REPLICA_TAKEOVER_H_
