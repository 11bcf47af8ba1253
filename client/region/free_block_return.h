// The return of a closing session's freed heap blocks to the region's free
// pool: the blocks on its allocator's free lists, and the rest of its heap
// chunk. Free lists live in clients, so without it they would die with the
// client, and a heap written by many short-lived clients would fill up;
// from the pool, other clients' allocators take them once the heap cursor
// has run out.
//
// It runs outside the event loop, with blocking round trips on the
// primary's queue pair, once nothing is in flight: a node of blocks at a
// time (client/protocol/free_pool_push.h). A live session hands back
// blocks it does not reuse the same way, from inside its event loop.
#ifndef RKV_CLIENT_REGION_FREE_BLOCK_RETURN_H_
#define RKV_CLIENT_REGION_FREE_BLOCK_RETURN_H_

#include "absl/status/status.h"
#include "client/region/region_copies.h"
#include "client/session/session.h"

namespace rkv::client_internal {

// Hands `session`'s freed blocks back to the free pool of the primary of
// `copies`, which are connected. Blocks still within their grace period
// may yet be read by a slow reader: on the real clock it waits them out
// (at most one grace period); on another they stay.
absl::Status ReturnFreeBlocks(Session& session, RegionCopies& copies, bool real_clock);

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_REGION_FREE_BLOCK_RETURN_H_
