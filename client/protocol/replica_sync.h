// Finishes an intent on the primary of a replicated region: brings every
// backup's copy of the slot to the intent's target while the intent still
// stands, then commits it (an intent to set a word becomes that word, a
// delete intent an empty slot).
//
// Intents are only ever rolled forward, by their owner or by whoever finds
// one in its way, so any change of the primary's slot from the intent word
// means that it was committed, by someone, after every backup held the
// target. A backup's slot is changed only by CAS from a word observed
// there, and only after a read of the primary, made after that
// observation, still showed the intent: while an intent stands, no later
// write of the slot can exist (a later write needs the committed word), so
// the observed word is older than the target and replacing it loses
// nothing. The owner skips the observation: it CASes from the word its
// intent replaced, which the backups hold unless something went wrong.
#ifndef RKV_CLIENT_PROTOCOL_REPLICA_SYNC_H_
#define RKV_CLIENT_PROTOCOL_REPLICA_SYNC_H_

#include <cstdint>
#include <optional>

#include "client/protocol/op_rounds.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"

namespace rkv::client_internal {

class ReplicaSync {
 public:
  // nullopt when scratch memory is short.
  static std::optional<ReplicaSync> Create(Session& session);

  enum class Outcome {
    kPosted,     // A round is posted: call OnRound when it completes.
    kDone,       // The intent is committed (by us or by someone else).
    kCommitted,  // The owner's: every backup holds the target, and the
                 // commit CAS is in the round, for the caller to post
                 // without waiting for it (the write is durable already;
                 // should the CAS not land, the next operation on the key
                 // finishes the intent).
    kFailed,     // Out of retries, or out of scratch memory: see status().
  };

  // The owner, right after its CAS installed `intent` in `slot` in place
  // of `replaced` (0 for an insert); its block is on every replica.
  Outcome StartOwner(OpRounds& rounds, uint64_t slot, uint64_t intent, uint64_t replaced);
  // An update's or delete's owner, in the round of its intent CAS on the
  // committed word `replaced`: each backup's CAS from `replaced` to
  // what `intent` leaves there, so that the common case copies in the
  // same round trip. Such
  // a CAS lands only where the backup still holds `replaced`; should the
  // intent CAS fail, it failed because another intent replaced
  // `replaced` in the same slot, whose finishing overwrites these.
  void PostTentative(OpRounds& rounds, uint64_t slot, uint64_t replaced, uint64_t intent);
  // After that round, when the intent CAS installed the intent.
  Outcome OnIntent(OpRounds& rounds);
  // Anyone who found `intent` in `slot`: the backups are read first, and
  // the target's block copied to them (its owner may have died before it
  // wrote them).
  Outcome StartHelper(OpRounds& rounds, uint64_t slot, uint64_t intent);
  Outcome OnRound(OpRounds& rounds);

  // After kDone, or once the owner's commit landed: the intent's target
  // when the primary was seen holding it (our commit took effect, or the
  // read that found the intent gone found it); 0 when not known — someone
  // else committed, and the slot may have moved on since.
  uint64_t SeenCommitted() const;
  // After the round of PostTentative: whether a tentative CAS took effect
  // on some backup (whose slot then names the intent's block until the
  // intent that beat ours, if ours failed, is finished).
  bool TentativeLanded() const;

  // The intent being finished, and its slot.
  uint64_t intent() const { return intent_; }
  uint64_t slot() const { return slot_; }
  const absl::Status& status() const { return status_; }

 private:
  enum class State { kObserve, kConfirm, kCopy, kCommit };

  ReplicaSync(Session& session, ScratchBuffer words) : s_(&session), words_(std::move(words)) {}

  // words_: [0, kMaxReplicas): per backup, what its slot was seen to hold
  // (the CAS results land here too); [kMaxReplicas]: the primary's slot;
  // [kMaxReplicas + 1]: the commit's result.
  uint64_t* seen() const { return words_.As<uint64_t>(); }
  uint64_t* primary() const { return words_.As<uint64_t>() + kMaxReplicas; }
  uint64_t* commit() const { return words_.As<uint64_t>() + kMaxReplicas + 1; }

  Outcome Confirm(OpRounds& rounds);
  Outcome Copy(OpRounds& rounds);
  Outcome Commit(OpRounds& rounds);
  Outcome Fail(absl::Status status);

  Session* s_;
  ScratchBuffer words_;
  ScratchBuffer block_;                   // The target's block, for a helper.
  uint64_t expected_[kMaxReplicas] = {};  // What each backup's CAS expected.
  uint64_t slot_ = 0;
  uint64_t replaced_ = 0;  // The tentative CASes' expected word.
  uint64_t intent_ = 0;
  uint64_t target_ = 0;  // What the backups' slots become (layout::BackupTarget).
  bool owner_ = false;   // Commits without waiting (kCommitted).
  bool copy_block_ = false;
  State state_ = State::kObserve;
  absl::Status status_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_REPLICA_SYNC_H_
