// The initiator half of a soft-fabric queue pair: send queue, completion
// queue, error state and counters. The TCP and simulated
// transports derive from it and differ only in how requests reach the
// target and how their results come back.
#ifndef RKV_COMMON_FABRIC_SOFT_SOFT_QUEUE_PAIR_H_
#define RKV_COMMON_FABRIC_SOFT_SOFT_QUEUE_PAIR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/fabric/fabric.h"
#include "common/fabric/memory_table.h"
#include "common/fabric/remote_op.h"
#include "common/random.h"

namespace rkv::fabric {

// The soft backend's completion channel: its queue pairs notify it as they
// queue each completion. Over TCP a derived channel (soft_tcp_queue_pair.cc)
// also wakes when responses arrive that nobody has read yet.
// Each transport's channel decides how to wait.
class SoftCompletionChannel : public CompletionChannel {
 public:
  virtual void Notify();

 protected:
  // Takes the notification, if one is pending.
  bool TakePending();

 private:
  std::mutex mu_;
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
};

class SoftQueuePair : public QueuePair {
 public:
  SoftQueuePair(std::shared_ptr<const MemoryTable> local, const QueuePairOptions& options);

  absl::Status Post(absl::Span<const WorkRequest> batch) final;
  size_t Poll(absl::Span<Completion> out) override;
  bool in_error() const final;
  QueuePairCounters counters() const final;
  QueuePairLimits limits() const final { return limits_; }

 protected:
  // One posted request on its way through the virtual NIC.
  struct Pending {
    WorkRequest wr;
    // Set when the NIC fails the request without executing it (a local
    // protection error). Requests after it are never sent: they are
    // flushed once it reaches the front.
    CompletionStatus refused = CompletionStatus::kSuccess;
    std::string inline_data;
    uint32_t progress = 0;  // Bytes executed so far (simulation).

    RemoteRequest remote() const {
      return {wr.opcode, wr.length, wr.remote_addr, wr.rkey, wr.compare_add, wr.swap};
    }
    const uint8_t* write_source() const {
      return wr.flags & kInline ? reinterpret_cast<const uint8_t*>(inline_data.data())
                                : static_cast<const uint8_t*>(wr.local);
    }
  };

  // Hands a validated batch to the transport. Implementations call
  // AdmitLocked under mu_ and then start the new requests on their way.
  virtual absl::Status Submit(std::vector<Pending> batch) = 0;

  // Appends `batch` to the send queue if it has room (else
  // ResourceExhausted), accounts the doorbell, and completes at once what
  // the queue pair's state decides: everything flushed in the error state,
  // a refused request that reaches the front.
  absl::Status AdmitLocked(std::vector<Pending>& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Completes the front request with `status`. Any error moves the queue
  // pair to the error state and flushes everything behind it.
  void CompleteFrontLocked(CompletionStatus status, uint32_t byte_len)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The connection is gone: the front request fails with kRetryExceeded,
  // the rest are flushed, and later posts fail the same way.
  void ConnectionLostLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Moves up to out.size() queued completions into `out`.
  size_t TakeCompletionsLocked(absl::Span<Completion> out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasCompletionsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !cq_.empty(); }
  bool InErrorLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return error_; }

  mutable std::mutex mu_;
  std::deque<Pending> outstanding_ ABSL_GUARDED_BY(mu_);

 private:
  void FailAllLocked(CompletionStatus first) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResolveRefusedFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushLocked(const Completion& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const MemoryTable> local_;
  const QueuePairLimits limits_;
  const std::shared_ptr<SoftCompletionChannel> channel_;  // May be null.
  std::deque<Completion> cq_ ABSL_GUARDED_BY(mu_);
  bool error_ ABSL_GUARDED_BY(mu_) = false;
  bool connection_lost_ ABSL_GUARDED_BY(mu_) = false;
  QueuePairCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SOFT_SOFT_QUEUE_PAIR_H_
