// One GET, PUT, INSERT or DELETE as an explicit state machine over rounds of
// one-sided requests. The client posts each round's requests (sharing the
// doorbell with other operations' rounds) and calls Step() when the round
// has completed, until the operation finishes.
//
// The protocol (docs/ARCHITECTURE.md has the argument for it):
// - A key lives in at most one committed slot among its two combined
//   buckets. Readers trust only committed slots.
// - A new key is claimed with CAS(0 -> pending) and the buckets are re-read
//   in the same doorbell (requests of a queue pair execute in order), then
//   committed with CAS(pending -> committed). Concurrent claims of one key
//   are settled by slot address: the highest claim kills the others
//   (CAS pending -> killed) before committing; a lower one helps the
//   highest commit and withdraws its own (CAS pending -> 0). So exactly one slot survives and a
//   value is never visible before its insert is decided.
// - Updates and deletes CAS the committed slot from the value they saw.
// - Blocks are written before any slot points to them and never changed
//   while one does; a replaced block is reused only after the grace period.
//
// The operation is a driver over the protocol's parts, each with its own
// state and scratch memory: HeapReservation (a block for a write),
// BucketSnapshot (the key's slots and what their blocks hold), CachedRead
// (GET through the slot cache), ClaimContest (publishing a new key) and
// SlotSwap (replacing a committed slot's word).
#ifndef RKV_CLIENT_PROTOCOL_KV_OPERATION_H_
#define RKV_CLIENT_PROTOCOL_KV_OPERATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/protocol/bucket_snapshot.h"
#include "client/protocol/cached_read.h"
#include "client/protocol/claim_contest.h"
#include "client/protocol/heap_reservation.h"
#include "client/protocol/op_rounds.h"
#include "client/protocol/replica_sync.h"
#include "client/protocol/slot_swap.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"
#include "common/fabric/types.h"

namespace rkv::client_internal {

class KvOperation {
 public:
  // The most requests one round holds: a kill round's CASes (at most 29
  // kills and a withdrawal), or one READ per block named by the two
  // combined buckets' slots (28).
  static constexpr uint32_t kMaxRoundRequests = 32;
  static_assert(ClaimContest::kMaxKills + 1 <= kMaxRoundRequests);

  // Values up to this size keep their buffer when the operation is reused;
  // a larger one's is let go, so that a pool of idle operations does not
  // hold megabytes.
  static constexpr size_t kKeptValueBytes = 64 << 10;

  // An idle operation: Reset gives it work. The client reuses operations,
  // so that one does not cost allocations of its own (its strings and
  // request list keep their capacity).
  explicit KvOperation(Session& session);
  KvOperation(const KvOperation&) = delete;
  KvOperation& operator=(const KvOperation&) = delete;

  // Readies an idle operation to run (Step starts it).
  void Reset(OpType type, absl::string_view key, absl::string_view value);
  // Hands back the scratch memory of a finished operation and makes it
  // idle; result() is cleared, so take it first.
  void Clear();

  // Starts the operation, or continues it after its round completed.
  void Step();
  // Start() could not get scratch memory; try again later.
  bool blocked() const { return blocked_; }
  bool finished() const { return finished_; }
  OpType type() const { return type_; }
  const std::string& key() const { return key_; }
  const absl::Status& status() const { return status_; }
  std::string& result() { return result_; }

  // The requests of the next round; the client posts and clears them.
  OpRounds& round() { return rounds_; }
  void OnPosted(absl::Time at) { rounds_.OnPosted(at); }

  const OpCosts& costs() const { return rounds_.costs(); }
  // A CAS of this operation was posted: failed now, its outcome is unknown.
  bool posted_cas() const { return rounds_.posted_cas(); }

  // Ends the operation with `status`, posting nothing more.
  void Finish(absl::Status status);
  // A finished operation may leave a last round to post, whose completion
  // nobody waits for (replicated: the commit of an intent already on every
  // copy); the client posts it after running the callback.
  bool has_tail() const { return finished_ && !rounds_.empty(); }
  // The tail completed (replicated: the intent's commit CAS ran).
  void OnTailLanded();

  // The heap blocks it holds, as the server's heap census takes them
  // (report words): its block, and those it stranded.
  void HeldBlocks(std::vector<uint64_t>* out) const;

 private:
  // Which part's round is in flight.
  enum class State {
    kStart,
    kCachedGet,
    kReserve,
    kBuckets,
    kBlocks,
    kContest,
    kSwap,
    kCachedSwap,
    kSync,  // Replicated: our intent, being copied to the backups.
    kHelp,  // Replicated: someone's intent on the key, finished before we go on.
  };

  void Start();
  // Takes the parts' scratch memory; false when the arena is short.
  bool TakeParts();

  // GET.
  void StartGet();
  void OnCachedGet();
  void DecideGet();
  // DELETE.
  void StartDelete();
  void DecideDelete();
  // PUT and INSERT.
  void StartWrite();
  void OnReserved(absl::StatusOr<uint64_t> block);
  void WriteBlock(uint64_t block);
  void DecideWrite();
  void OnContest(ClaimContest::Outcome outcome);
  void FreeMyBlock();

  // Reading the key's slots, shared by every type.
  void ReadBuckets();
  void OnBuckets();
  void OnBlocks();
  void Decide();
  // After a swap: done, or read again (a failed cached swap costs no retry).
  void OnSwap(bool count_retry);
  // Replicated regions: our intent (installed by the swap, or by the claim
  // contest for an insert) goes to the backups and is committed; an intent
  // found on the key is finished first, then the key read again.
  bool replicated() const { return s_.replicas() > 1; }
  // The swap's CAS (replicated: its intent, and the backups' tentative CASes).
  void PostSwap(uint64_t slot, uint64_t expected, uint64_t desired);
  void StartSync(uint64_t slot, uint64_t intent, uint64_t replaced);
  void OnSync(ReplicaSync::Outcome outcome);
  void CacheCommitted();
  // Blocks of tries whose intent lost while a tentative word naming them
  // landed on a backup: freed when the operation succeeds, kept out of use
  // when it fails.
  void ReleaseStranded(bool succeeded);
  bool deleting() const { return type_ == OpType::kDelete; }
  void Help(const BucketSnapshot::SlotSeen& intent);
  void OnHelp(ReplicaSync::Outcome outcome);
  // A cached slot young enough to CAS from.
  const CachedSlot* FreshCachedSlot() const;

  Session& s_;
  OpType type_ = OpType::kGet;
  std::string key_;
  std::string value_;
  bool write_ = false;
  State state_ = State::kStart;
  bool blocked_ = false;
  bool finished_ = false;
  absl::Status status_;
  std::string result_;
  OpRounds rounds_;

  std::optional<BucketSnapshot> snapshot_;
  std::optional<CachedRead> cached_read_;
  std::optional<SlotSwap> swap_;
  std::optional<HeapReservation> reservation_;
  std::optional<ClaimContest> contest_;
  std::optional<ReplicaSync> sync_;  // Replicated regions only.
  bool swap_synced_ = false;         // The intent being synced is the swap's.

  // Writes: our block and the committed slot word that names it.
  uint8_t size_class_ = 0;
  ScratchBuffer block_;    // The block, encoded.
  uint64_t my_block_ = 0;  // Region offset; 0 until reserved, or once freed.
  uint64_t my_committed_ = 0;
  std::vector<uint64_t> stranded_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_KV_OPERATION_H_
