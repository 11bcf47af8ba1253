#include "client/protocol/kv_operation.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/protocol/outcome.h"
#include "common/layout/region_format.h"

namespace rkv::client_internal {

using SlotSeen = BucketSnapshot::SlotSeen;

KvOperation::KvOperation(Session& session) : s_(session), rounds_(session) {
  rounds_.Reserve(kMaxRoundRequests);
}

void KvOperation::Reset(OpType type, absl::string_view key, absl::string_view value) {
  type_ = type;
  key_.assign(key.data(), key.size());
  value_.assign(value.data(), value.size());
  write_ = type == OpType::kPut || type == OpType::kInsert;
  state_ = State::kStart;
  blocked_ = false;
  finished_ = false;
  status_ = absl::OkStatus();
  result_.clear();
  rounds_.Reset();
  size_class_ = 0;
  my_block_ = 0;
  my_committed_ = 0;
  stranded_.clear();
}

void KvOperation::Clear() {
  // The parts name key_: they go before it may change.
  sync_.reset();
  contest_.reset();
  reservation_.reset();
  swap_.reset();
  cached_read_.reset();
  snapshot_.reset();
  block_.Reset();
  rounds_.Clear();
  result_.clear();
  status_ = absl::OkStatus();
  if (value_.capacity() > kKeptValueBytes) std::string().swap(value_);
}

void KvOperation::Finish(absl::Status status) {
  if (absl::IsUnavailable(status) && posted_cas()) status = WithUnknownOutcome(std::move(status));
  ReleaseStranded(status.ok());
  status_ = std::move(status);
  finished_ = true;
  rounds_.Clear();
}

void KvOperation::Step() {
  switch (state_) {
    case State::kStart:
      return Start();
    case State::kCachedGet:
      return OnCachedGet();
    case State::kReserve:
      return OnReserved(reservation_->OnRound(rounds_));
    case State::kBuckets:
      return OnBuckets();
    case State::kBlocks:
      return OnBlocks();
    case State::kContest:
      return OnContest(contest_->OnRound(rounds_));
    case State::kSwap:
      return OnSwap(/*count_retry=*/true);
    case State::kCachedSwap:
      return OnSwap(/*count_retry=*/false);
    case State::kSync:
      return OnSync(sync_->OnRound(rounds_));
    case State::kHelp:
      return OnHelp(sync_->OnRound(rounds_));
  }
}

void KvOperation::Start() {
  if (key_.empty() || key_.size() > layout::kMaxKeyBytes) {
    return Finish(absl::InvalidArgumentError(absl::StrCat(
        "key of ", key_.size(), " bytes; keys are 1 to ", layout::kMaxKeyBytes, " bytes")));
  }
  if (value_.size() > layout::kMaxValueBytes) {
    return Finish(absl::InvalidArgumentError(absl::StrCat("value of ", value_.size(),
                                                          " bytes; values are at most ",
                                                          layout::kMaxValueBytes, " bytes")));
  }
  blocked_ = !TakeParts();
  if (blocked_) return;
  switch (type_) {
    case OpType::kGet:
      return StartGet();
    case OpType::kDelete:
      return StartDelete();
    case OpType::kPut:
    case OpType::kInsert:
      return StartWrite();
  }
}

bool KvOperation::TakeParts() {
  // All or nothing: an operation that started never waits for memory.
  snapshot_ = BucketSnapshot::Create(s_, key_, /*keep_values=*/type_ == OpType::kGet);
  bool ok = snapshot_.has_value();
  if (type_ != OpType::kGet) {
    swap_ = SlotSwap::Create(s_, key_);
    ok &= swap_.has_value();
  }
  if (replicated() && ok) {
    sync_ = ReplicaSync::Create(s_);
    ok &= sync_.has_value();
  }
  if (write_ && ok) {
    size_class_ = layout::ClassFor(layout::BlockBytes(key_.size(), value_.size()));
    block_ = ScratchBuffer::Allocate(s_.scratch(), layout::ClassBytes(size_class_));
    reservation_ = HeapReservation::Create(s_, size_class_);
    contest_ = ClaimContest::Create(s_, *snapshot_, key_);
    ok &= block_ && reservation_.has_value() && contest_.has_value();
  }
  if (!ok) {
    contest_.reset();
    reservation_.reset();
    block_.Reset();
    swap_.reset();
    sync_.reset();
    snapshot_.reset();
  }
  return ok;
}

const CachedSlot* KvOperation::FreshCachedSlot() const {
  const CachedSlot* cached = s_.cache().Find(key_, s_.region_id());
  if (cached == nullptr || s_.Now() - cached->seen_at >= s_.options().grace_period / 2) {
    return nullptr;
  }
  return cached;
}

// ---- GET ------------------------------------------------------------------

void KvOperation::StartGet() {
  if (const CachedSlot* cached = s_.cache().Find(key_, s_.region_id()); cached != nullptr) {
    cached_read_.emplace(s_, key_);
    if (cached_read_->Post(rounds_, *cached)) {
      state_ = State::kCachedGet;
      return;
    }
  }
  ReadBuckets();
}

void KvOperation::OnCachedGet() {
  std::optional<std::string> value = cached_read_->OnRound(rounds_);
  if (!value.has_value()) return ReadBuckets();
  result_ = *std::move(value);
  Finish(absl::OkStatus());
}

void KvOperation::DecideGet() {
  if (const SlotSeen* s = snapshot_->FindCommitted(); s != nullptr) {
    result_ = snapshot_->ValueOf(s->word);
    s_.cache().Put(key_, s_.region_id(), {s->offset, s->word, snapshot_->observed_at()});
    return Finish(absl::OkStatus());
  }
  s_.cache().Erase(key_);
  Finish(absl::NotFoundError("key not found"));
}

// ---- DELETE ---------------------------------------------------------------

void KvOperation::StartDelete() {
  if (const CachedSlot* cached = FreshCachedSlot(); cached != nullptr) {
    PostSwap(cached->slot_offset, cached->word, 0);
    state_ = State::kCachedSwap;
    return;
  }
  ReadBuckets();
}

void KvOperation::DecideDelete() {
  if (const SlotSeen* s = snapshot_->FindCommitted(); s != nullptr) {
    PostSwap(s->offset, s->word, 0);
    state_ = State::kSwap;
    return;
  }
  s_.cache().Erase(key_);
  Finish(absl::NotFoundError("key not found"));
}

// ---- PUT and INSERT -------------------------------------------------------

void KvOperation::StartWrite() {
  layout::EncodeBlockInto(key_, value_, block_.data());
  OnReserved(reservation_->Start(rounds_));
}

void KvOperation::OnReserved(absl::StatusOr<uint64_t> block) {
  if (!block.ok()) return Finish(block.status());
  if (*block == 0) {
    state_ = State::kReserve;
    return;
  }
  WriteBlock(*block);
}

void KvOperation::WriteBlock(uint64_t block) {
  my_block_ = block;
  my_committed_ =
      layout::Slot{snapshot_->placement().fingerprint, size_class_, block, false}.Encode();
  snapshot_->SetOwnBlock(my_committed_);
  contest_->SetWord(my_committed_);
  // On every replica, at the same offset (they are mirrors).
  for (int r = 0; r < s_.replicas(); ++r) {
    rounds_.AddWrite(block, block_.data(), static_cast<uint32_t>(layout::ClassBytes(size_class_)),
                     r);
  }
  if (type_ == OpType::kPut) {
    if (const CachedSlot* cached = FreshCachedSlot(); cached != nullptr) {
      // The block lands before the CAS that publishes it: same queue pair.
      PostSwap(cached->slot_offset, cached->word, my_committed_);
      state_ = State::kCachedSwap;
      return;
    }
  }
  ReadBuckets();
}

void KvOperation::DecideWrite() { OnContest(contest_->Decide(rounds_)); }

void KvOperation::OnContest(ClaimContest::Outcome outcome) {
  switch (outcome) {
    case ClaimContest::Outcome::kPosted:
      state_ = State::kContest;
      return;
    case ClaimContest::Outcome::kReread:
      return ReadBuckets();
    case ClaimContest::Outcome::kBucketsRead:
      return OnBuckets();
    case ClaimContest::Outcome::kDone:
      if (replicated()) {
        swap_synced_ = false;
        return StartSync(contest_->claimed_slot(), layout::IntentOf(my_committed_), 0);
      }
      return Finish(absl::OkStatus());
    case ClaimContest::Outcome::kCommittedElsewhere: {
      const SlotSeen& committed = contest_->committed();
      if (layout::IsIntent(committed.word)) return Help(committed);
      if (type_ == OpType::kInsert) {
        s_.cache().Put(key_, s_.region_id(),
                       {committed.offset, committed.word, snapshot_->observed_at()});
        FreeMyBlock();
        return Finish(absl::AlreadyExistsError("key already exists"));
      }
      PostSwap(committed.offset, committed.word, my_committed_);
      state_ = State::kSwap;
      return;
    }
    case ClaimContest::Outcome::kIndexFull:
      FreeMyBlock();
      return Finish(absl::ResourceExhaustedError(
          "index full: both candidate buckets of the key have no free slot it may claim"));
  }
}

void KvOperation::HeldBlocks(std::vector<uint64_t>* out) const {
  if (my_block_ != 0) out->push_back(layout::ReportBlock(size_class_, my_block_));
  for (uint64_t block : stranded_) out->push_back(layout::ReportBlock(size_class_, block));
}

void KvOperation::FreeMyBlock() {
  if (my_block_ == 0) return;
  // A block that sat in a claimed slot may still be named by a rival's
  // stale CAS: it waits out the grace period like any other.
  if (contest_->ever_claimed()) {
    s_.heap().Free(my_block_, size_class_, s_.Now());
  } else {
    s_.heap().FreeUnpublished(my_block_, size_class_, s_.Now());
  }
  my_block_ = 0;
}

// ---- Shared ---------------------------------------------------------------

void KvOperation::ReadBuckets() {
  snapshot_->PostRead(rounds_);
  state_ = State::kBuckets;
}

void KvOperation::OnBuckets() {
  absl::StatusOr<bool> reading_blocks = snapshot_->OnBuckets(rounds_);
  if (!reading_blocks.ok()) return Finish(reading_blocks.status());
  if (*reading_blocks) {
    state_ = State::kBlocks;
    return;
  }
  Decide();
}

void KvOperation::OnBlocks() {
  if (snapshot_->OnBlocks()) return Decide();
  if (!rounds_.Retry()) {
    return Finish(absl::UnavailableError(
        absl::StrCat("no consistent view of key after ", OpRounds::kMaxRetries, " retries")));
  }
  snapshot_->Forget();
  ReadBuckets();
}

void KvOperation::Decide() {
  if (replicated()) {
    if (const SlotSeen* intent = snapshot_->FindIntent(); intent != nullptr) return Help(*intent);
  }
  switch (type_) {
    case OpType::kGet:
      return DecideGet();
    case OpType::kDelete:
      return DecideDelete();
    case OpType::kPut:
    case OpType::kInsert:
      return DecideWrite();
  }
}

void KvOperation::OnSwap(bool count_retry) {
  if (swap_->OnRound(rounds_)) {
    if (!replicated()) return Finish(absl::OkStatus());
    swap_synced_ = true;
    state_ = State::kSync;
    return OnSync(sync_->OnIntent(rounds_));
  }
  if (count_retry && !rounds_.Retry()) {
    return Finish(absl::UnavailableError("too much contention on the key"));
  }
  if (replicated() && my_block_ != 0) {
    // Our word may sit on a backup as a tentative one, about to be copied
    // over by a finisher whose CAS expects it. Published again in the same
    // slot (our next try, an update or an insert), it would meet that late
    // CAS and be undone (ABA): the next try takes a new block, a new word.
    if (sync_->TentativeLanded()) {
      stranded_.push_back(my_block_);
    } else {
      s_.heap().Free(my_block_, size_class_, s_.Now());
    }
    my_block_ = 0;
    return OnReserved(reservation_->Start(rounds_));
  }
  // For a PUT the block is written already; it stays ours.
  ReadBuckets();
}

// ---- Replicated regions ---------------------------------------------------

void KvOperation::PostSwap(uint64_t slot, uint64_t expected, uint64_t desired) {
  swap_->Post(rounds_, slot, expected, desired);
  if (replicated()) sync_->PostTentative(rounds_, slot, expected, swap_->intent());
}

void KvOperation::StartSync(uint64_t slot, uint64_t intent, uint64_t replaced) {
  state_ = State::kSync;
  OnSync(sync_->StartOwner(rounds_, slot, intent, replaced));
}

void KvOperation::OnSync(ReplicaSync::Outcome outcome) {
  switch (outcome) {
    case ReplicaSync::Outcome::kPosted:
      return;
    case ReplicaSync::Outcome::kDone:  // Committed by a helper.
      // Every backup holds the new word, and no copy names the replaced block.
      if (swap_synced_) swap_->FreeReplaced();
      CacheCommitted();
      return Finish(absl::OkStatus());
    case ReplicaSync::Outcome::kCommitted:  // Our commit is the round left.
      // An update's replaced block is named by no copy now. A delete's is,
      // by its intent on the primary, until the commit lands: should it
      // never land and the block be reused, the intent would name another
      // key's block and nobody would recognize it to finish it.
      if (swap_synced_ && !deleting()) swap_->FreeReplaced();
      ReleaseStranded(/*succeeded=*/true);
      status_ = absl::OkStatus();
      finished_ = true;  // Keeps the round: the commit is our tail.
      return;
    case ReplicaSync::Outcome::kFailed:
      return Finish(sync_->status());
  }
}

void KvOperation::OnTailLanded() {
  if (swap_synced_ && deleting()) swap_->FreeReplaced();
  CacheCommitted();
}

void KvOperation::CacheCommitted() {
  // A cached word is one a later CAS will expect, so it must be committed
  // by then: a tentative CAS from a word whose intent still stands may land
  // on a backup, where that intent's finisher, copying over what it finds,
  // undoes it unseen (a delete then left its key's old word on a backup).
  // And it must be the slot's word as of its date, not one someone else
  // committed that may have been replaced already.
  if (const uint64_t word = sync_->SeenCommitted(); word != 0) {
    s_.cache().Put(key_, s_.region_id(), {sync_->slot(), word, rounds_.posted_at()});
  }
}

void KvOperation::ReleaseStranded(bool succeeded) {
  // After a success every intent that beat ours is finished, and with it
  // every tentative word of ours copied over. After a failure one may
  // still sit on a backup (its intent's owner dead, nobody finishing it),
  // where a takeover would make it the key's word: the block stays out
  // of use for good rather than come back holding another key.
  if (succeeded) {
    for (uint64_t block : stranded_) s_.heap().Free(block, size_class_, s_.Now());
  }
  stranded_.clear();
}

void KvOperation::Help(const SlotSeen& intent) {
  state_ = State::kHelp;
  OnHelp(sync_->StartHelper(rounds_, intent.offset, intent.word));
}

void KvOperation::OnHelp(ReplicaSync::Outcome outcome) {
  switch (outcome) {
    case ReplicaSync::Outcome::kPosted:
      return;
    case ReplicaSync::Outcome::kCommitted:  // An owner's only; a helper waits.
    case ReplicaSync::Outcome::kDone:
      if (!rounds_.Retry()) {
        return Finish(absl::UnavailableError("too much contention on the key"));
      }
      return ReadBuckets();
    case ReplicaSync::Outcome::kFailed:
      return Finish(sync_->status());
  }
}

}  // namespace rkv::client_internal
