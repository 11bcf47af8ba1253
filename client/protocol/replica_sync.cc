#include "client/protocol/replica_sync.h"

#include <utility>

#include "common/layout/region_format.h"

namespace rkv::client_internal {

std::optional<ReplicaSync> ReplicaSync::Create(Session& session) {
  ScratchBuffer words = ScratchBuffer::Allocate(session.scratch(), 8 * (kMaxReplicas + 2));
  if (!words) return std::nullopt;
  return ReplicaSync(session, std::move(words));
}

ReplicaSync::Outcome ReplicaSync::StartOwner(OpRounds& rounds, uint64_t slot, uint64_t intent,
                                             uint64_t replaced) {
  slot_ = slot;
  intent_ = intent;
  target_ = layout::BackupTarget(intent);
  copy_block_ = false;
  owner_ = true;
  status_ = absl::OkStatus();
  for (int r = 1; r < s_->replicas(); ++r) expected_[r] = replaced;
  return Copy(rounds);
}

void ReplicaSync::PostTentative(OpRounds& rounds, uint64_t slot, uint64_t replaced,
                                uint64_t intent) {
  slot_ = slot;
  replaced_ = replaced;
  intent_ = intent;
  target_ = layout::BackupTarget(intent);
  for (int r = 1; r < s_->replicas(); ++r) rounds.AddCas(slot, &seen()[r], replaced, target_, r);
}

ReplicaSync::Outcome ReplicaSync::OnIntent(OpRounds& rounds) {
  copy_block_ = false;
  owner_ = true;
  status_ = absl::OkStatus();
  bool all = true;
  for (int r = 1; r < s_->replicas(); ++r) {
    if (seen()[r] == replaced_) {
      expected_[r] = target_;
    } else {
      expected_[r] = seen()[r];
      all = all && seen()[r] == target_;
    }
  }
  if (all) return Commit(rounds);
  // A backup held something else (a rival's tentative word, or what a
  // writer that died left): copy over it once the intent is seen to stand.
  return Confirm(rounds);
}

ReplicaSync::Outcome ReplicaSync::StartHelper(OpRounds& rounds, uint64_t slot, uint64_t intent) {
  slot_ = slot;
  intent_ = intent;
  target_ = layout::BackupTarget(intent);
  copy_block_ = !layout::IsTombstone(target_);
  owner_ = false;
  status_ = absl::OkStatus();
  for (int r = 1; r < s_->replicas(); ++r) rounds.AddRead(slot_, &seen()[r], 8, r);
  if (copy_block_) {
    const layout::Slot t = layout::Slot::Decode(target_);
    const uint64_t bytes = layout::ClassBytes(t.size_class);
    block_ = ScratchBuffer::Allocate(s_->scratch(), bytes);
    if (!block_) {
      rounds.Clear();
      return Fail(absl::UnavailableError(
          "client scratch memory ran out in the middle of the operation; raise scratch_bytes"));
    }
    // Immutable while the intent names it; and the intent stood when we
    // found it, before this read, and still stands if Confirm says so.
    rounds.AddRead(t.offset, block_.data(), static_cast<uint32_t>(bytes));
  }
  state_ = State::kObserve;
  return Outcome::kPosted;
}

ReplicaSync::Outcome ReplicaSync::OnRound(OpRounds& rounds) {
  switch (state_) {
    case State::kObserve:
      for (int r = 1; r < s_->replicas(); ++r) expected_[r] = seen()[r];
      return Confirm(rounds);
    case State::kConfirm:
      if (*primary() != intent_) return Outcome::kDone;  // Committed by someone.
      return Copy(rounds);
    case State::kCopy: {
      bool all = true;
      for (int r = 1; r < s_->replicas(); ++r) {
        if (expected_[r] == target_) continue;
        if (seen()[r] != expected_[r]) all = false;
        expected_[r] = seen()[r] == expected_[r] ? target_ : seen()[r];
      }
      if (all) return Commit(rounds);
      if (!rounds.Retry()) {
        return Fail(absl::UnavailableError("too much contention on the key's backups"));
      }
      // A backup held something else: copy over it only if the intent
      // still stands now, after what we saw there.
      return Confirm(rounds);
    }
    case State::kCommit:  // Ours or not: the intent is done.
      return Outcome::kDone;
  }
  return Outcome::kDone;
}

ReplicaSync::Outcome ReplicaSync::Confirm(OpRounds& rounds) {
  rounds.AddRead(slot_, primary(), 8);
  state_ = State::kConfirm;
  return Outcome::kPosted;
}

ReplicaSync::Outcome ReplicaSync::Copy(OpRounds& rounds) {
  const layout::Slot t = layout::Slot::Decode(target_);
  for (int r = 1; r < s_->replicas(); ++r) {
    if (expected_[r] == target_) continue;
    if (copy_block_) {
      // The same bytes the owner wrote, should its write never have
      // reached this replica; ahead of the CAS on the same queue pair.
      rounds.AddWrite(t.offset, block_.data(), static_cast<uint32_t>(block_.size()), r);
    }
    rounds.AddCas(slot_, &seen()[r], expected_[r], target_, r);
  }
  if (rounds.empty()) return Commit(rounds);
  state_ = State::kCopy;
  return Outcome::kPosted;
}

ReplicaSync::Outcome ReplicaSync::Commit(OpRounds& rounds) {
  rounds.AddCas(slot_, commit(), intent_, layout::IntentTarget(intent_));
  state_ = State::kCommit;
  return owner_ ? Outcome::kCommitted : Outcome::kPosted;
}

uint64_t ReplicaSync::SeenCommitted() const {
  const uint64_t target = layout::IntentTarget(intent_);
  if (target == 0) return 0;
  if (state_ == State::kCommit && *commit() == intent_) return target;
  if (state_ == State::kConfirm && *primary() == target) return target;
  return 0;
}

bool ReplicaSync::TentativeLanded() const {
  for (int r = 1; r < s_->replicas(); ++r) {
    if (seen()[r] == replaced_) return true;
  }
  return false;
}

ReplicaSync::Outcome ReplicaSync::Fail(absl::Status status) {
  status_ = std::move(status);
  return Outcome::kFailed;
}

}  // namespace rkv::client_internal
