#include "client/protocol/claim_contest.h"

#include <algorithm>
#include <utility>

#include "absl/container/inlined_vector.h"

namespace rkv::client_internal {
namespace {

// Slots of the two combined buckets, pointed to: on the stack, as they are
// at most this many.
using SlotList =
    absl::InlinedVector<const BucketSnapshot::SlotSeen*, 2 * layout::kSlotsPerCombinedBucket>;

}  // namespace

std::optional<ClaimContest> ClaimContest::Create(Session& session, BucketSnapshot& snapshot,
                                                 absl::string_view key) {
  ScratchBuffer words = ScratchBuffer::AllocateFor<Words>(session.scratch());
  if (!words) return std::nullopt;
  return ClaimContest(session, snapshot, key, std::move(words));
}

ClaimContest::Outcome ClaimContest::Decide(OpRounds& rounds) {
  const std::vector<SlotSeen>& slots = snapshot_->slots();
  // First, what became of our own claim, if we hold one.
  if (claimed_slot_ != 0) {
    uint64_t word = 0;
    for (const SlotSeen& s : slots) {
      if (s.offset == claimed_slot_) word = s.word;
    }
    if (word == layout::KilledOf(pending_word_)) {
      // A rival won. Clear the marker (only we may), then decide afresh.
      rounds.AddCas(claimed_slot_, &words().cas, word, 0);
      claimed_slot_ = 0;
      state_ = State::kCleared;
      return Outcome::kPosted;
    }
    if (word != pending_word_) {
      // Neither pending nor killed: a rival committed our claim, and others
      // may have changed the slot since. Our write took effect then.
      return Outcome::kDone;
    }
  }
  const SlotSeen* committed = nullptr;
  const SlotSeen* mine = nullptr;
  SlotList others;
  for (const SlotSeen& s : slots) {
    if (s.word == 0 || layout::IsKilled(s.word) || !snapshot_->KeyMatches(s.word)) continue;
    if (s.offset == claimed_slot_) {
      mine = &s;
    } else if (layout::IsCommitted(s.word) || layout::IsIntent(s.word)) {
      // An intent (replicated regions) is a write already decided; the
      // caller finishes it and reads again.
      committed = &s;
    } else {
      others.push_back(&s);
    }
  }
  if (committed != nullptr) {
    if (mine != nullptr) {
      // The key was committed elsewhere: withdraw our claim first.
      kill_.assign(1, *mine);
      rounds.AddCas(mine->offset, &words().kills[0], pending_word_, 0);
      winner_ = {0, 0};
      state_ = State::kKill;
      return Outcome::kPosted;
    }
    committed_ = *committed;
    return Outcome::kCommittedElsewhere;
  }
  if (mine == nullptr) return Claim(rounds);
  // Concurrent claims of our key: the highest slot wins. Whoever acts
  // first kills every other claim it saw (and, if not the winner, withdraws
  // its own), and only when all of that succeeded commits the winner. A
  // claim made after our re-read sees the winner, so exactly one commits.
  winner_ = *mine;
  for (const SlotSeen* o : others) {
    if (o->offset > winner_.offset) winner_ = *o;
  }
  kill_.clear();
  for (const SlotSeen* o : others) {
    if (o->offset != winner_.offset && kill_.size() < kMaxKills) kill_.push_back(*o);
  }
  if (winner_.offset != mine->offset) kill_.push_back(*mine);
  for (size_t i = 0; i < kill_.size(); ++i) {
    // Rivals are marked killed; our own claim is simply withdrawn.
    const bool own = kill_[i].offset == claimed_slot_;
    rounds.AddCas(kill_[i].offset, &words().kills[i], kill_[i].word,
                  own ? 0 : layout::KilledOf(kill_[i].word));
  }
  if (kill_.empty()) return OnKill(rounds);
  state_ = State::kKill;
  return Outcome::kPosted;
}

ClaimContest::Outcome ClaimContest::Claim(OpRounds& rounds) {
  // The emptier combined bucket; in it a random free slot of the key's own
  // main bucket if there is one, so that the overflow bucket, shared with
  // the neighbouring main bucket, is left for when it is needed.
  const SlotSeen* best = nullptr;
  int best_free = 0;
  for (int b = 0; b < 2; ++b) {
    SlotList free, free_main;
    for (const SlotSeen& s : snapshot_->slots()) {
      if (std::find(claimed_before_.begin(), claimed_before_.end(), s.offset) !=
          claimed_before_.end()) {
        continue;
      }
      if (s.word == 0 && layout::InCombinedBucket(snapshot_->bucket_offset(b), s.offset)) {
        free.push_back(&s);
        if (!layout::IsOverflowSlot(s_->layout(), s.offset)) free_main.push_back(&s);
      }
    }
    if (static_cast<int>(free.size()) > best_free) {
      best_free = static_cast<int>(free.size());
      const auto& pool = free_main.empty() ? free : free_main;
      best = pool[s_->rng().Uniform(pool.size())];
    }
  }
  if (best == nullptr) return Outcome::kIndexFull;
  claim_attempt_ = best->offset;
  claimed_before_.push_back(best->offset);
  if (s_->broken().skip_conflict_resolution) {
    rounds.AddCas(best->offset, &words().cas, 0, committed_word_);
    state_ = State::kDirectCommit;
    return Outcome::kPosted;
  }
  rounds.AddCas(best->offset, &words().cas, 0, pending_word_);
  snapshot_->PostRead(rounds);  // Same doorbell, after the CAS: sees our claim and rivals'.
  state_ = State::kClaim;
  return Outcome::kPosted;
}

ClaimContest::Outcome ClaimContest::OnRound(OpRounds& rounds) {
  const State state = std::exchange(state_, State::kIdle);
  switch (state) {
    case State::kClaim:
      if (words().cas == 0) claimed_slot_ = claim_attempt_;  // Otherwise a rival took the slot.
      return Outcome::kBucketsRead;
    case State::kKill:
      return OnKill(rounds);
    case State::kCommit:
      if (words().cas == pending_word_ || words().cas == Published(committed_word_)) {
        // Replicated: cached once the caller's ReplicaSync committed it.
        if (s_->replicas() == 1) {
          s_->cache().Put(key_, s_->region_id(),
                          {claimed_slot_, committed_word_, rounds.posted_at()});
        }
        return Outcome::kDone;
      }
      return Outcome::kReread;  // Killed by a higher claim: the re-read tells us how.
    case State::kDirectCommit:
      return words().cas == 0 ? Outcome::kDone : Outcome::kReread;
    case State::kCleared:  // Decide afresh.
    case State::kHelped:   // The rival's claim is committed: the re-read finds it.
    case State::kIdle:
      break;
  }
  return Outcome::kReread;
}

ClaimContest::Outcome ClaimContest::OnKill(OpRounds& rounds) {
  bool all_done = true;
  for (size_t i = 0; i < kill_.size(); ++i) {
    const bool done = words().kills[i] == kill_[i].word;
    if (done && kill_[i].offset == claimed_slot_) claimed_slot_ = 0;  // Withdrawn.
    all_done &= done;
  }
  if (!all_done) return Outcome::kReread;            // A rival moved first.
  if (winner_.offset == 0) return Outcome::kReread;  // We only withdrew.
  rounds.AddCas(winner_.offset, &words().cas, winner_.word,
                Published(layout::CommittedOf(winner_.word)));
  // Our own claim commits; a rival's, and we re-read to find it committed.
  state_ = winner_.offset == claimed_slot_ ? State::kCommit : State::kHelped;
  return Outcome::kPosted;
}

}  // namespace rkv::client_internal
