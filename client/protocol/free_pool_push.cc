#include "client/protocol/free_pool_push.h"

#include "common/layout/region_format.h"

namespace rkv::client_internal {

std::optional<FreePoolPush> FreePoolPush::Create(Session& session, uint8_t size_class,
                                                 absl::Span<const uint64_t> blocks, uint64_t head) {
  ScratchBuffer node =
      ScratchBuffer::Allocate(session.scratch(), layout::FreeNodeBytes(size_class));
  ScratchBuffer result = ScratchBuffer::AllocateFor<uint64_t>(session.scratch());
  if (!node || !result) return std::nullopt;
  return FreePoolPush(size_class, blocks, head, std::move(node), std::move(result));
}

void FreePoolPush::Start(OpRounds& rounds) {
  const layout::FreePoolHead h = layout::FreePoolHead::Decode(head_);
  layout::EncodeFreeNode(h.node, blocks_.subspan(1), size_class_, node_.data());
  desired_ = layout::FreePoolHead{static_cast<uint16_t>(h.tag + 1), blocks_.front()}.Encode();
  rounds.AddWrite(blocks_.front(), node_.data(),
                  static_cast<uint32_t>(layout::FreeNodeBytes(size_class_)));
  rounds.AddCas(layout::FreePoolHeadOffset(size_class_), result_.As<uint64_t>(), head_, desired_);
}

absl::StatusOr<bool> FreePoolPush::OnRound(OpRounds& rounds) {
  const uint64_t found = *result_.As<uint64_t>();
  if (found == head_) {
    head_ = desired_;
    return true;
  }
  head_ = found;
  if (!rounds.Retry()) return absl::UnavailableError("too much contention on the free pool");
  Start(rounds);
  return false;
}

}  // namespace rkv::client_internal
