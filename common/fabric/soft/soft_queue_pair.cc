#include "common/fabric/soft/soft_queue_pair.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/fabric/work_request_check.h"

namespace rkv::fabric {
namespace {

bool IsAtomic(Opcode op) { return op == Opcode::kCas64 || op == Opcode::kFaa64; }

}  // namespace

SoftQueuePair::SoftQueuePair(std::shared_ptr<const MemoryTable> local,
                             const QueuePairOptions& options)
    : local_(std::move(local)),
      // The soft NIC has no hardware READ/atomic limit; it reports the
      // send-queue depth so callers that respect the limit still may batch.
      limits_{options.max_send_wr, options.max_inline_data, options.max_send_wr},
      channel_(std::static_pointer_cast<SoftCompletionChannel>(options.channel)) {}

void SoftCompletionChannel::Notify() {
  std::lock_guard<std::mutex> lock(mu_);
  pending_ = true;
}

bool SoftCompletionChannel::TakePending() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(pending_, false);
}

absl::Status SoftQueuePair::Post(absl::Span<const WorkRequest> batch) {
  std::vector<Pending> pending;
  pending.reserve(batch.size());
  for (const WorkRequest& wr : batch) {
    if (auto s = CheckWorkRequest(wr, limits_.max_inline_data); !s.ok()) return s;
    Pending p;
    p.wr = wr;
    if (wr.flags & kInline) {
      p.inline_data.assign(static_cast<const char*>(wr.local), wr.length);
    } else if (wr.length > 0) {
      // The NIC checks the local buffer against its lkey; results land
      // there, so READs and atomics need local write access.
      const uint32_t need = wr.opcode == Opcode::kWrite ? 0 : kLocalWrite;
      if (!local_->CheckLocal(wr.lkey, wr.local, wr.length, need)) {
        p.refused = CompletionStatus::kLocalProtectionError;
      }
    }
    pending.push_back(std::move(p));
  }
  return Submit(std::move(pending));
}

absl::Status SoftQueuePair::AdmitLocked(std::vector<Pending>& batch) {
  if (outstanding_.size() + batch.size() > limits_.max_send_wr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("send queue full: ", outstanding_.size(), " outstanding + ", batch.size(),
                     " posted > max_send_wr ", limits_.max_send_wr));
  }
  counters_.doorbells++;
  for (Pending& p : batch) {
    counters_.requests++;
    counters_.bytes += IsAtomic(p.wr.opcode) ? 8 : p.wr.length;
    outstanding_.push_back(std::move(p));
  }
  if (error_) {
    FailAllLocked(CompletionStatus::kFlushed);
  } else if (connection_lost_) {
    FailAllLocked(CompletionStatus::kRetryExceeded);
  } else {
    ResolveRefusedFrontLocked();
  }
  return absl::OkStatus();
}

void SoftQueuePair::PushLocked(const Completion& c) {
  if (c.status != CompletionStatus::kSuccess) counters_.error_completions++;
  cq_.push_back(c);
  if (channel_ != nullptr) channel_->Notify();
}

void SoftQueuePair::FailAllLocked(CompletionStatus first) {
  CompletionStatus status = first;
  for (const Pending& p : outstanding_) {
    PushLocked({p.wr.wr_id, p.wr.opcode, status, 0});
    status = CompletionStatus::kFlushed;
  }
  outstanding_.clear();
  error_ = true;
}

void SoftQueuePair::ResolveRefusedFrontLocked() {
  if (!outstanding_.empty() && outstanding_.front().refused != CompletionStatus::kSuccess) {
    FailAllLocked(outstanding_.front().refused);
  }
}

void SoftQueuePair::CompleteFrontLocked(CompletionStatus status, uint32_t byte_len) {
  if (status != CompletionStatus::kSuccess) {
    FailAllLocked(status);
    return;
  }
  const Pending& p = outstanding_.front();
  if (p.wr.flags & kSignaled) PushLocked({p.wr.wr_id, p.wr.opcode, status, byte_len});
  outstanding_.pop_front();
  ResolveRefusedFrontLocked();
}

void SoftQueuePair::ConnectionLostLocked() {
  connection_lost_ = true;
  if (!outstanding_.empty()) FailAllLocked(CompletionStatus::kRetryExceeded);
}

size_t SoftQueuePair::TakeCompletionsLocked(absl::Span<Completion> out) {
  const size_t n = std::min(out.size(), cq_.size());
  std::copy_n(cq_.begin(), n, out.begin());
  cq_.erase(cq_.begin(), cq_.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

size_t SoftQueuePair::Poll(absl::Span<Completion> out) {
  std::lock_guard<std::mutex> lock(mu_);
  return TakeCompletionsLocked(out);
}

bool SoftQueuePair::in_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

QueuePairCounters SoftQueuePair::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace rkv::fabric
