// Pushes one node of freed blocks onto the region's free pool for a size
// class (common/layout/region_format.h, "The free pool"): the node is the
// first block and lists the others. One round writes the node, linked to
// the head as last seen, and CASes the head to it, both on the primary
// (requests of a queue pair execute in order, so the node has landed when
// the CAS makes it reachable). A CAS that lost tells the head it found:
// the next round links to that one. The blocks must be past their grace
// period: nobody reads them any more, and the node overwrites the first.
#ifndef RKV_CLIENT_PROTOCOL_FREE_POOL_PUSH_H_
#define RKV_CLIENT_PROTOCOL_FREE_POOL_PUSH_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/protocol/op_rounds.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"

namespace rkv::client_internal {

class FreePoolPush {
 public:
  // At most this many blocks a push: a node and the blocks it lists.
  static uint64_t MaxBlocks(uint8_t size_class) { return layout::FreeNodeCapacity(size_class) + 1; }

  // nullopt when scratch memory is short. `blocks` (1 to MaxBlocks), which
  // the caller keeps until the push is done, are region offsets of blocks
  // of `size_class`; `head` is the pool's head word as last seen (a guess:
  // 0 is fine). Allocates no heap memory: a live client's event loop runs it.
  static std::optional<FreePoolPush> Create(Session& session, uint8_t size_class,
                                            absl::Span<const uint64_t> blocks, uint64_t head);

  // Adds the push's round to `rounds`.
  void Start(OpRounds& rounds);
  // After the round completed: true once the blocks are in the pool; false
  // when another round was added. Unavailable after too many lost CASes:
  // the blocks are still the caller's (blocks()).
  absl::StatusOr<bool> OnRound(OpRounds& rounds);

  // The pool's head word as this push last saw it (after success: its own).
  uint64_t head() const { return head_; }
  uint8_t size_class() const { return size_class_; }
  absl::Span<const uint64_t> blocks() const { return blocks_; }

 private:
  FreePoolPush(uint8_t size_class, absl::Span<const uint64_t> blocks, uint64_t head,
               ScratchBuffer node, ScratchBuffer result)
      : size_class_(size_class),
        blocks_(blocks),
        head_(head),
        node_(std::move(node)),
        result_(std::move(result)) {}

  uint8_t size_class_;
  absl::Span<const uint64_t> blocks_;
  uint64_t head_;
  uint64_t desired_ = 0;
  ScratchBuffer node_;
  ScratchBuffer result_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_FREE_POOL_PUSH_H_
