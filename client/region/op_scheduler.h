// The operations of one session, from their submission to their one
// completion:
// - Admission: at most max_outstanding run at once, each in a slot of its
//   own (the slot names it in its requests' wr_ids); the others wait in
//   the order submitted. An operation starts only once it holds all the
//   scratch memory its parts need, so that it never runs out halfway.
//   Finished operations are kept for the next ones to reuse, so that a
//   steady load allocates nothing.
// - Order: writes of one key run one at a time, in the order submitted.
//   Two in flight together would race for the same slot, and one of them
//   would lose its CAS and start over (a hot key under a skewed load). A
//   write whose key has one active waits beside the queue, and starts
//   before anything queued after it. Reads are not held back.
// - Completion: every accepted operation's callback runs exactly once —
//   when it finishes, or when it is failed because the connection broke or
//   the session closed — and a finished one's costs are added to the
//   session's.
//
// The event loop (region_client.cc) posts the active operations' rounds and
// steps them as their completions arrive; this class decides which
// operations are active.
#ifndef RKV_CLIENT_REGION_OP_SCHEDULER_H_
#define RKV_CLIENT_REGION_OP_SCHEDULER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/protocol/kv_operation.h"
#include "client/session/op_stats.h"
#include "client/session/ring_deque.h"
#include "client/session/session.h"
#include "rkv/client.h"

namespace rkv::client_internal {

// An accepted operation and the callback that completes it.
struct PendingOp {
  std::unique_ptr<KvOperation> op;
  Client::GetCallback on_get;
  Client::DoneCallback on_done;
  OpType type = OpType::kGet;
  absl::Time started;  // When the caller submitted it (MonotonicNow).
  // Completions the posted round still waits for: one per copy it went to.
  uint32_t waiting = 0;
  // The operation is done and its callback has run; what is in flight is
  // its tail (KvOperation::has_tail), and the slot is free once it lands.
  bool tail = false;
};

class OpScheduler {
 public:
  // The operations run on `session`, which outlives the scheduler;
  // `max_outstanding` is at least 1.
  OpScheduler(Session& session, uint32_t max_outstanding);

  void Submit(OpType type, absl::string_view key, absl::string_view value,
              Client::GetCallback on_get, Client::DoneCallback on_done);
  // Starts operations that wait for a slot, as many as there is room for.
  void StartWaiting();

  // The active operations, by slot; a free slot holds no operation.
  size_t slots() const { return active_.size(); }
  PendingOp& slot(size_t i) { return active_[i]; }
  size_t active() const { return active_count_; }
  // Of the active: finished operations whose tail is in flight.
  size_t tails() const { return tails_; }
  size_t in_flight() const { return queued_.size() + deferred_.size() + active_count_; }
  const OpCosts& costs(OpType type) const { return costs_[static_cast<int>(type)]; }
  const OpStats& stats(OpType type) const { return stats_.stats(type); }

  // Accounts for slot `i`'s finished operation and runs its callback. The
  // slot is free afterwards, unless the operation has a tail to post
  // (slot(i).tail).
  void Complete(size_t i);
  // Slot `i`'s tail landed: the slot is free.
  void TailLanded(size_t i);
  // Fails every active operation (a tail is dropped: its callback has run);
  // returns how many.
  size_t FailActive(const absl::Status& status);
  // Fails every operation not yet started; returns how many.
  size_t FailQueued(const absl::Status& status);

 private:
  // Steps `p` to its first round in slot `slot`; false (and `p` kept) when
  // it must wait for scratch memory.
  bool Start(PendingOp& p, size_t slot);
  // A write of `p`'s key is active: `p`, a write too, must wait for it.
  bool MustWait(const PendingOp& p) const {
    return p.op->type() != OpType::kGet && writing_.contains(p.op->key());
  }
  void Vacate(PendingOp& p) {
    p = PendingOp{};
    active_count_--;
  }
  // Takes back a finished operation for reuse.
  void Recycle(std::unique_ptr<KvOperation> op) {
    op->Clear();
    if (idle_ops_.size() < active_.size()) idle_ops_.push_back(std::move(op));
  }
  // Runs `p`'s callback with `status`, marked as of unknown outcome if the
  // operation had posted a CAS.
  void Finish(PendingOp& p, absl::Status status);

  Session& session_;
  RingDeque<PendingOp> queued_;
  std::vector<PendingOp> active_;  // max_outstanding slots.
  size_t active_count_ = 0;
  size_t tails_ = 0;
  // A write waits in `deferred_`, in order, while `writing_` holds its key:
  // the keys of the active writes (viewing their operations' own).
  absl::flat_hash_set<absl::string_view> writing_;
  std::vector<PendingOp> deferred_;
  // At most one per slot: a burst queued beyond that is let go as it
  // finishes.
  std::vector<std::unique_ptr<KvOperation>> idle_ops_;
  OpCosts costs_[kOpTypes];
  OpStatsRecorder stats_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_REGION_OP_SCHEDULER_H_
