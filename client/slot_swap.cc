#include "client/slot_swap.h"

#include "common/layout/region_format.h"

namespace rkv::client_internal {

std::optional<SlotSwap> SlotSwap::Create(Session& session, absl::string_view key) {
  ScratchBuffer result = ScratchBuffer::AllocateFor<uint64_t>(session.scratch());
  if (!result) return std::nullopt;
  return SlotSwap(session, key, std::move(result));
}

void SlotSwap::Post(OpRounds& rounds, uint64_t slot_offset, uint64_t expected, uint64_t desired) {
  slot_offset_ = slot_offset;
  expected_ = expected;
  desired_ = desired;
  rounds.AddCas(slot_offset, result_.As<uint64_t>(), expected, desired);
}

bool SlotSwap::OnRound(const OpRounds& rounds) {
  if (*result_.As<uint64_t>() != expected_) {
    s_->cache().Erase(key_);
    return false;
  }
  const layout::Slot old = layout::Slot::Decode(expected_);
  s_->heap().Free(old.offset, old.size_class, s_->Now());
  if (desired_ == 0) {
    s_->cache().Erase(key_);
  } else {
    s_->cache().Put(key_, s_->region_id(), {slot_offset_, desired_, rounds.posted_at()});
  }
  return true;
}

}  // namespace rkv::client_internal
