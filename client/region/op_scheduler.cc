#include "client/region/op_scheduler.h"

#include <string>
#include <utility>

#include "client/protocol/outcome.h"
#include "common/monotonic_clock.h"

namespace rkv::client_internal {

OpScheduler::OpScheduler(Session& session, uint32_t max_outstanding)
    : session_(session), active_(max_outstanding) {
  idle_ops_.reserve(max_outstanding);
  writing_.reserve(max_outstanding);
}

void OpScheduler::Submit(OpType type, absl::string_view key, absl::string_view value,
                         Client::GetCallback on_get, Client::DoneCallback on_done) {
  std::unique_ptr<KvOperation> op;
  if (idle_ops_.empty()) {
    op = std::make_unique<KvOperation>(session_);
  } else {
    op = std::move(idle_ops_.back());
    idle_ops_.pop_back();
  }
  op->Reset(type, key, value);
  queued_.push_back({std::move(op), std::move(on_get), std::move(on_done), type, MonotonicNow()});
}

void OpScheduler::StartWaiting() {
  size_t slot = 0;
  auto free_slot = [&] {
    while (slot < active_.size() && active_[slot].op != nullptr) ++slot;
    return slot < active_.size();
  };
  // Deferred writes first: they were submitted before anything queued.
  size_t kept = 0;
  bool room = true;
  for (size_t d = 0; d < deferred_.size(); ++d) {
    PendingOp& p = deferred_[d];
    if (room && !MustWait(p) && free_slot() && Start(p, slot)) continue;
    if (room && !MustWait(p)) room = false;  // No slot, or no memory: stop starting.
    if (kept != d) deferred_[kept] = std::move(p);
    kept++;
  }
  deferred_.resize(kept);
  while (room && !queued_.empty()) {
    PendingOp& next = queued_.front();
    if (MustWait(next)) {
      deferred_.push_back(std::move(next));
    } else if (!free_slot() || !Start(next, slot)) {
      break;
    }
    queued_.pop_front();
  }
}

bool OpScheduler::Start(PendingOp& p, size_t slot) {
  p.op->Step();
  if (p.op->blocked()) {
    // Scratch memory is shared with the client's other sessions: give up
    // only when nothing at all holds any.
    if (active_count_ > 0 || !session_.scratch().empty()) return false;
    p.op->Finish(absl::ResourceExhaustedError(
        "client scratch memory too small for this operation; raise scratch_bytes"));
  }
  if (p.op->type() != OpType::kGet) writing_.insert(p.op->key());
  active_[slot] = std::move(p);
  active_count_++;
  return true;
}

void OpScheduler::Complete(size_t i) {
  PendingOp& p = active_[i];
  KvOperation& op = *p.op;
  if (op.type() != OpType::kGet) writing_.erase(op.key());
  OpCosts& c = costs_[static_cast<int>(op.type())];
  c.ops++;
  c.round_trips += op.costs().round_trips;
  c.requests += op.costs().requests;
  c.bytes += op.costs().bytes;
  c.retries += op.costs().retries;
  Client::GetCallback on_get = std::exchange(p.on_get, nullptr);
  Client::DoneCallback on_done = std::exchange(p.on_done, nullptr);
  absl::Status status = op.status();
  stats_.Record(p.type, status, MonotonicNow() - p.started);
  std::string result = std::move(op.result());
  const bool tail = op.has_tail();
  if (tail) {
    p.tail = true;  // Its scratch memory holds the tail's results.
    tails_++;
  } else {
    Recycle(std::move(p.op));  // Frees its scratch memory before the callback runs.
  }
  if (on_get) {
    if (status.ok()) {
      on_get(std::move(result));
    } else {
      on_get(std::move(status));
    }
  } else if (on_done) {
    on_done(std::move(status));
  }
  if (!tail) Vacate(p);
}

void OpScheduler::TailLanded(size_t i) {
  PendingOp& p = active_[i];
  p.op->OnTailLanded();
  Recycle(std::move(p.op));
  Vacate(p);
  tails_--;
}

void OpScheduler::Finish(PendingOp& p, absl::Status status) {
  if (p.op != nullptr && p.op->posted_cas()) status = WithUnknownOutcome(std::move(status));
  stats_.Record(p.type, status, MonotonicNow() - p.started);
  if (p.on_get) p.on_get(status);
  if (p.on_done) p.on_done(status);
}

size_t OpScheduler::FailActive(const absl::Status& status) {
  size_t failed = 0;
  for (PendingOp& p : active_) {
    if (p.op == nullptr) continue;
    p.op->round().Clear();
    PendingOp done = std::move(p);
    Vacate(p);
    if (done.tail) {  // Its callback has run.
      tails_--;
      continue;
    }
    Finish(done, status);
    failed++;
  }
  writing_.clear();
  return failed;
}

size_t OpScheduler::FailQueued(const absl::Status& status) {
  size_t failed = 0;
  for (PendingOp& p : deferred_) {
    Finish(p, status);
    failed++;
  }
  deferred_.clear();
  while (!queued_.empty()) {
    PendingOp p = std::move(queued_.front());
    queued_.pop_front();
    Finish(p, status);
    failed++;
  }
  return failed;
}

}  // namespace rkv::client_internal
