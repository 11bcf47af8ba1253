// Reserves one heap block of a size class for a write. The client's
// allocator gives one when it can; otherwise a chunk comes from the server
// with one FAA on the heap cursor; and once the cursor has run out, a node
// of blocks other clients freed is popped from the region's free pool:
// READ the head, READ the node, CAS the head past it. A pop whose CAS lost,
// or whose node was popped and reused meanwhile (it then fails its checks),
// starts over from the head.
#ifndef RKV_CLIENT_PROTOCOL_HEAP_RESERVATION_H_
#define RKV_CLIENT_PROTOCOL_HEAP_RESERVATION_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "client/protocol/op_rounds.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"
#include "common/layout/region_format.h"

namespace rkv::client_internal {

class HeapReservation {
 public:
  // nullopt when scratch memory is short.
  static std::optional<HeapReservation> Create(Session& session, uint8_t size_class);

  // The block, as a region offset; or 0 when a round was added to `rounds`:
  // call OnRound when it has completed. ResourceExhausted when the heap is
  // full; Unavailable when the free pool is too contended.
  absl::StatusOr<uint64_t> Start(OpRounds& rounds);
  absl::StatusOr<uint64_t> OnRound(OpRounds& rounds);

 private:
  enum class State { kIdle, kChunk, kPoolHead, kPoolNode, kPoolPop };
  // One result word per kind of request, each written by its own round.
  struct Words {
    uint64_t cursor;  // The heap cursor before our FAA.
    uint64_t head;    // The free-pool head read.
    uint64_t popped;  // What the pop CAS found.
  };

  HeapReservation(Session& session, uint8_t size_class, ScratchBuffer words, ScratchBuffer node)
      : s_(&session), size_class_(size_class), words_(std::move(words)), node_(std::move(node)) {}

  absl::StatusOr<uint64_t> OnChunk(OpRounds& rounds);
  absl::StatusOr<uint64_t> ReadPoolHead(OpRounds& rounds);
  absl::StatusOr<uint64_t> OnPoolHead(OpRounds& rounds);
  absl::StatusOr<uint64_t> OnPoolNode(OpRounds& rounds);
  absl::StatusOr<uint64_t> OnPoolPop(OpRounds& rounds);
  absl::StatusOr<uint64_t> RetryPool(OpRounds& rounds);
  Words& words() { return *words_.As<Words>(); }

  Session* s_;
  uint8_t size_class_;
  State state_ = State::kIdle;
  ScratchBuffer words_;
  ScratchBuffer node_;  // A free-pool node of the class, as read.
  uint64_t chunk_bytes_ = 0;
  uint64_t pool_head_ = 0;  // The head word the pop expects.
  layout::FreeNode pool_node_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_HEAP_RESERVATION_H_
