#include "client/protocol/slot_swap.h"

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
  posted_ = s_->replicas() == 1 ? desired
            : desired != 0      ? layout::IntentOf(desired)
                                : layout::DeleteIntentOf(expected);
  rounds.AddCas(slot_offset, result_.As<uint64_t>(), expected, posted_);
}

void SlotSwap::FreeReplaced() {
  const layout::Slot old = layout::Slot::Decode(expected_);
  s_->heap().Free(old.offset, old.size_class, s_->Now());
}

bool SlotSwap::OnRound(const OpRounds& rounds) {
  if (*result_.As<uint64_t>() != expected_) {
    s_->cache().Erase(key_);
    return false;
  }
  if (s_->replicas() > 1) {
    // The new word is not committed until the caller's ReplicaSync is
    // done; until then no CAS may expect it (a backup may hold it already,
    // and a CAS that lands there while the primary's intent stands would
    // go unseen by the intent's finisher), so the cache learns it then.
    s_->cache().Erase(key_);
    return true;
  }
  FreeReplaced();
  if (desired_ == 0) {
    s_->cache().Erase(key_);
  } else {
    s_->cache().Put(key_, s_->region_id(), {slot_offset_, desired_, rounds.posted_at()});
  }
  return true;
}

}  // namespace rkv::client_internal
