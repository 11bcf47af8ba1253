// Publishing a key that has no committed slot, and settling concurrent
// publications of one key, so that exactly one slot ends up committed.
//
// A claim is CAS(free slot: 0 -> pending), with both buckets re-read in
// the same doorbell: requests of a queue pair execute in order, so the
// re-read sees every rival claim made before ours, and any claim made after
// it sees ours in its own re-read. Among claims of one key the highest slot
// wins. Whoever acts kills every other claim it saw (pending -> killed),
// withdraws its own if it is not the winner (pending -> 0), and only when
// all of that succeeded commits the winner (pending -> committed): a loser
// helps the winner finish, so nobody waits on a client that may have
// crashed. A committed slot for the key ends the contest: a claimant
// withdraws, and the caller decides (INSERT fails, PUT updates that slot).
// Only a claim's owner clears a killed marker, so an owner that finds its
// claim neither pending nor killed knows it was committed by a helper.
#ifndef RKV_CLIENT_PROTOCOL_CLAIM_CONTEST_H_
#define RKV_CLIENT_PROTOCOL_CLAIM_CONTEST_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "client/protocol/bucket_snapshot.h"
#include "client/protocol/op_rounds.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"

namespace rkv::client_internal {

class ClaimContest {
 public:
  // The most CASes of one kill round: rivals killed, and our withdrawal.
  static constexpr size_t kMaxKills = 29;

  enum class Outcome {
    kPosted,              // A round was added: call OnRound when it has completed.
    kReread,              // Read the buckets afresh, then Decide.
    kBucketsRead,         // The round re-read the buckets too: take them, then Decide.
    kDone,                // Our write took effect (replicated: our intent stands, or did).
    kCommittedElsewhere,  // The key has a committed slot (or an intent) not ours: committed().
    kIndexFull,           // Neither bucket has a slot the key may claim.
  };

  // A contest for `key` among the slots `snapshot` reads (both must outlive
  // it). nullopt when scratch memory is short.
  static std::optional<ClaimContest> Create(Session& session, BucketSnapshot& snapshot,
                                            absl::string_view key);

  // The committed slot word to publish: it names our block, which holds
  // the key. Set once the block is written, before the first Decide.
  void SetWord(uint64_t word) {
    committed_word_ = word;
    pending_word_ = word | layout::kPendingBit;
  }
  // Acts on a complete snapshot.
  Outcome Decide(OpRounds& rounds);
  Outcome OnRound(OpRounds& rounds);

  // After kCommittedElsewhere: the key's committed slot.
  const BucketSnapshot::SlotSeen& committed() const { return committed_; }
  // After kDone: the slot our claim took.
  uint64_t claimed_slot() const { return claimed_slot_; }
  // Whether a claim CAS of ours was ever posted: our block may then be
  // named by a rival's stale view, and must wait out the grace period.
  bool ever_claimed() const { return !claimed_before_.empty(); }

 private:
  enum class State { kIdle, kClaim, kKill, kCommit, kCleared, kHelped, kDirectCommit };
  using SlotSeen = BucketSnapshot::SlotSeen;
  // One result word per CAS of a round.
  struct Words {
    uint64_t cas;                   // The claim, commit or clearing CAS.
    uint64_t kills[kMaxKills + 1];  // A kill round's CASes.
  };

  ClaimContest(Session& session, BucketSnapshot& snapshot, absl::string_view key,
               ScratchBuffer words)
      : s_(&session), snapshot_(&snapshot), key_(key), words_(std::move(words)) {}

  Outcome Claim(OpRounds& rounds);
  Outcome OnKill(OpRounds& rounds);
  // What a claim decided becomes: committed, or in a replicated region an
  // intent that the caller copies to the backups before it commits.
  uint64_t Published(uint64_t committed) const {
    return s_->replicas() > 1 ? layout::IntentOf(committed) : committed;
  }
  Words& words() { return *words_.As<Words>(); }

  Session* s_;
  BucketSnapshot* snapshot_;
  absl::string_view key_;
  uint64_t committed_word_ = 0;
  uint64_t pending_word_ = 0;
  ScratchBuffer words_;
  State state_ = State::kIdle;

  uint64_t claimed_slot_ = 0;   // The slot our pending claim holds; 0 if none.
  uint64_t claim_attempt_ = 0;  // The slot the last claim CAS targeted.
  // Every slot a claim CAS targeted. An operation never claims a slot
  // twice: with the same block the claim is the same word, and a rival's
  // CAS decided on the old claim would take the new one for it (ABA).
  std::vector<uint64_t> claimed_before_;
  std::vector<SlotSeen> kill_;  // The claims a kill round targets.
  SlotSeen winner_{0, 0};       // The claim to commit after the kills; 0: none.
  SlotSeen committed_{0, 0};
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_CLAIM_CONTEST_H_
