#include "client/protocol/heap_reservation.h"

#include "absl/strings/str_cat.h"

namespace rkv::client_internal {

std::optional<HeapReservation> HeapReservation::Create(Session& session, uint8_t size_class) {
  ScratchBuffer words = ScratchBuffer::AllocateFor<Words>(session.scratch());
  // The node buffer is taken now, though few writes need it: a write that
  // started should not run out of scratch memory halfway.
  ScratchBuffer node =
      ScratchBuffer::Allocate(session.scratch(), layout::FreeNodeBytes(size_class));
  if (!words || !node) return std::nullopt;
  return HeapReservation(session, size_class, std::move(words), std::move(node));
}

absl::StatusOr<uint64_t> HeapReservation::Start(OpRounds& rounds) {
  if (const uint64_t block = s_->heap().Allocate(size_class_, s_->Now()); block != 0) {
    state_ = State::kIdle;
    return block;
  }
  chunk_bytes_ = s_->heap().ChunkRequestBytes(size_class_);
  rounds.AddFaa(layout::HeaderOffsets::kHeapCursor, &words().cursor, chunk_bytes_);
  state_ = State::kChunk;
  return 0;
}

absl::StatusOr<uint64_t> HeapReservation::OnRound(OpRounds& rounds) {
  switch (state_) {
    case State::kChunk:
      return OnChunk(rounds);
    case State::kPoolHead:
      return OnPoolHead(rounds);
    case State::kPoolNode:
      return OnPoolNode(rounds);
    case State::kPoolPop:
      return OnPoolPop(rounds);
    case State::kIdle:
      break;
  }
  return absl::InternalError("heap reservation stepped with no round in flight");
}

absl::StatusOr<uint64_t> HeapReservation::OnChunk(OpRounds& rounds) {
  if (s_->heap().AddChunk(words().cursor, chunk_bytes_, s_->Now())) return Start(rounds);
  // The cursor has run out, but chunks that operations in flight with
  // this one took may still have room.
  if (const uint64_t block = s_->heap().Allocate(size_class_, s_->Now()); block != 0) {
    state_ = State::kIdle;
    return block;
  }
  return ReadPoolHead(rounds);
}

absl::StatusOr<uint64_t> HeapReservation::ReadPoolHead(OpRounds& rounds) {
  rounds.AddRead(layout::FreePoolHeadOffset(size_class_), &words().head, 8);
  state_ = State::kPoolHead;
  return 0;
}

absl::StatusOr<uint64_t> HeapReservation::OnPoolHead(OpRounds& rounds) {
  const uint64_t head = words().head;
  const layout::FreePoolHead h = layout::FreePoolHead::Decode(head);
  if (h.node == 0) {
    state_ = State::kIdle;
    return absl::ResourceExhaustedError(
        absl::StrCat("the server's heap is full (", s_->layout().heap_bytes,
                     " bytes, none free of class ", size_class_, ")"));
  }
  pool_head_ = head;
  rounds.AddRead(h.node, node_.data(), static_cast<uint32_t>(layout::FreeNodeBytes(size_class_)));
  state_ = State::kPoolNode;
  return 0;
}

absl::StatusOr<uint64_t> HeapReservation::OnPoolNode(OpRounds& rounds) {
  absl::StatusOr<layout::FreeNode> node =
      layout::DecodeFreeNode(absl::string_view(reinterpret_cast<const char*>(node_.data()),
                                               layout::FreeNodeBytes(size_class_)),
                             size_class_, s_->layout());
  if (!node.ok()) return RetryPool(rounds);  // Popped and reused by someone else meanwhile.
  const layout::FreePoolHead h = layout::FreePoolHead::Decode(pool_head_);
  pool_node_ = *std::move(node);
  pool_node_.blocks.push_back(h.node);  // The node's own block is free too.
  rounds.AddCas(layout::FreePoolHeadOffset(size_class_), &words().popped, pool_head_,
                layout::FreePoolHead{static_cast<uint16_t>(h.tag + 1), pool_node_.next}.Encode());
  state_ = State::kPoolPop;
  return 0;
}

absl::StatusOr<uint64_t> HeapReservation::OnPoolPop(OpRounds& rounds) {
  if (words().popped != pool_head_) return RetryPool(rounds);
  s_->heap().AddRecycled(size_class_, pool_node_.blocks, s_->Now());
  pool_node_ = {};
  return Start(rounds);
}

absl::StatusOr<uint64_t> HeapReservation::RetryPool(OpRounds& rounds) {
  if (!rounds.Retry()) {
    state_ = State::kIdle;
    return absl::UnavailableError("too much contention on the server's free pool");
  }
  return ReadPoolHead(rounds);
}

}  // namespace rkv::client_internal
