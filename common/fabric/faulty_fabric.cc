#include "common/fabric/faulty_fabric.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/fabric/work_request_check.h"
#include "common/monotonic_clock.h"
#include "common/random.h"

namespace rkv::fabric {
namespace {

// Wraps a queue pair. Every request goes to the inner queue pair signaled,
// so that the wrapper sees each one retire and can fail it or those behind
// it exactly where a fault says; completions of requests the caller did not
// signal are swallowed unless they carry an error, as a NIC does.
class FaultyQueuePair final : public QueuePair {
 public:
  FaultyQueuePair(std::unique_ptr<QueuePair> inner, const FaultOptions& faults, Clock clock,
                  uint64_t seed)
      : inner_(std::move(inner)),
        limits_(inner_->limits()),
        faults_(faults),
        clock_(std::move(clock)),
        rng_(seed) {}

  absl::Status Post(absl::Span<const WorkRequest> batch) override;
  size_t Poll(absl::Span<Completion> out) override;
  size_t Wait(absl::Span<Completion> out, absl::Duration timeout) override;
  bool in_error() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  QueuePairCounters counters() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
  }
  QueuePairLimits limits() const override { return limits_; }

 private:
  enum class Fault : uint8_t {
    kNone,
    kDrop,     // The connection breaks when the request is reached.
    kRefuse,   // Fails without executing, once everything before it is done.
    kLoseAck,  // Executes, then fails as if its acknowledgement was lost.
  };
  struct Entry {
    WorkRequest wr;
    bool signaled = false;  // As the caller posted it.
    Fault fault = Fault::kNone;
    absl::Time release;  // Not sent before this time.
    std::string inline_data;
  };

  absl::Time Now() const { return clock_ ? clock_() : MonotonicNow(); }
  // Sends held requests whose time has come, in order.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Retires sent requests as the inner queue pair completed them.
  void RetireLocked(absl::Span<const Completion> done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The connection is gone: the first request not yet retired fails with
  // `first`, every later one is flushed, and so is everything posted later.
  void BreakLocked(CompletionStatus first) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitLocked(const Entry& e, CompletionStatus status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t TakeLocked(absl::Span<Completion> out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Polls (or, with a positive timeout, waits on) the inner queue pair and
  // handles what it completed.
  void Progress(absl::Duration timeout);

  // Held by the one thread that polls the inner queue pair, so that its
  // completions are retired in the order it returned them.
  std::mutex poll_mu_;
  mutable std::mutex mu_;
  // Shared with a poller that waits on it outside mu_; null once broken.
  std::shared_ptr<QueuePair> inner_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<QueuePair>> broken_ ABSL_GUARDED_BY(mu_);
  const QueuePairLimits limits_;
  const FaultOptions faults_;
  const Clock clock_;
  Rng rng_ ABSL_GUARDED_BY(mu_);
  std::deque<Entry> sent_ ABSL_GUARDED_BY(mu_);  // Posted to inner_, not retired.
  std::deque<Entry> held_ ABSL_GUARDED_BY(mu_);  // Not yet posted to inner_.
  std::deque<Completion> cq_ ABSL_GUARDED_BY(mu_);
  bool error_ ABSL_GUARDED_BY(mu_) = false;
  QueuePairCounters counters_ ABSL_GUARDED_BY(mu_);
};

absl::Status FaultyQueuePair::Post(absl::Span<const WorkRequest> batch) {
  for (const WorkRequest& wr : batch) {
    if (absl::Status s = CheckWorkRequest(wr, limits_.max_inline_data); !s.ok()) return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (sent_.size() + held_.size() + batch.size() > limits_.max_send_wr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("send queue full: ", sent_.size() + held_.size(), " outstanding + ",
                     batch.size(), " posted > max_send_wr ", limits_.max_send_wr));
  }
  counters_.doorbells++;
  const absl::Time now = Now();
  for (const WorkRequest& wr : batch) {
    counters_.requests++;
    counters_.bytes += wr.opcode == Opcode::kCas64 || wr.opcode == Opcode::kFaa64 ? 8 : wr.length;
    Entry e{wr, (wr.flags & kSignaled) != 0, Fault::kNone, now, {}};
    if (wr.flags & kInline) e.inline_data.assign(static_cast<const char*>(wr.local), wr.length);
    if (error_) {
      EmitLocked(e, CompletionStatus::kFlushed);
      continue;
    }
    if (rng_.Bernoulli(faults_.drop_probability)) {
      e.fault = Fault::kDrop;
    } else if (rng_.Bernoulli(faults_.fail_probability)) {
      // Half the failures happen before the request executes, half after:
      // a caller can never tell which from the completion.
      e.fault = rng_.Uniform(2) == 0 ? Fault::kRefuse : Fault::kLoseAck;
    }
    if (rng_.Bernoulli(faults_.delay_probability)) {
      const uint64_t max_us = std::max<int64_t>(1, absl::ToInt64Microseconds(faults_.max_delay));
      e.release += absl::Microseconds(1 + rng_.Uniform(max_us));
    }
    held_.push_back(std::move(e));
  }
  PumpLocked();
  return absl::OkStatus();
}

void FaultyQueuePair::PumpLocked() {
  const absl::Time now = Now();
  std::vector<WorkRequest> out;
  while (!error_ && !held_.empty() && held_.front().release <= now) {
    Entry& e = held_.front();
    if (e.fault == Fault::kDrop) break;
    // A refused request fails once everything before it has retired.
    if (e.fault == Fault::kRefuse && !(sent_.empty() && out.empty())) break;
    if (e.fault == Fault::kRefuse) return BreakLocked(CompletionStatus::kRetryExceeded);
    sent_.push_back(std::move(e));
    held_.pop_front();
    WorkRequest wr = sent_.back().wr;
    if (wr.flags & kInline) wr.local = sent_.back().inline_data.data();
    wr.flags |= kSignaled;
    out.push_back(wr);
  }
  if (!out.empty() && !inner_->Post(out).ok()) return BreakLocked(CompletionStatus::kRetryExceeded);
  if (!error_ && !held_.empty() && held_.front().fault == Fault::kDrop &&
      held_.front().release <= now) {
    BreakLocked(CompletionStatus::kRetryExceeded);
  }
}

void FaultyQueuePair::RetireLocked(absl::Span<const Completion> done) {
  for (const Completion& c : done) {
    if (error_ || sent_.empty()) return;  // Failed already when the connection broke.
    Entry e = std::move(sent_.front());
    sent_.pop_front();
    if (c.status != CompletionStatus::kSuccess) {
      EmitLocked(e, c.status);
      return BreakLocked(CompletionStatus::kFlushed);
    }
    if (e.fault == Fault::kLoseAck) {
      EmitLocked(e, CompletionStatus::kRetryExceeded);
      return BreakLocked(CompletionStatus::kFlushed);
    }
    if (e.signaled) cq_.push_back({e.wr.wr_id, e.wr.opcode, c.status, c.byte_len});
  }
}

void FaultyQueuePair::BreakLocked(CompletionStatus first) {
  CompletionStatus status = first;
  for (std::deque<Entry>* q : {&sent_, &held_}) {
    for (const Entry& e : *q) {
      EmitLocked(e, status);
      status = CompletionStatus::kFlushed;
    }
    q->clear();
  }
  error_ = true;
  // Requests already sent may still execute at the target, as when a
  // connection breaks with requests on the wire: the inner queue pair is
  // kept, unpolled, so that its requests go on (the simulation steps them).
  if (inner_ != nullptr) broken_.push_back(std::move(inner_));
}

void FaultyQueuePair::EmitLocked(const Entry& e, CompletionStatus status) {
  if (status != CompletionStatus::kSuccess) counters_.error_completions++;
  cq_.push_back({e.wr.wr_id, e.wr.opcode, status, 0});
}

size_t FaultyQueuePair::TakeLocked(absl::Span<Completion> out) {
  const size_t n = std::min(out.size(), cq_.size());
  std::copy_n(cq_.begin(), n, out.begin());
  cq_.erase(cq_.begin(), cq_.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

void FaultyQueuePair::Progress(absl::Duration timeout) {
  std::lock_guard<std::mutex> poll_lock(poll_mu_);
  std::shared_ptr<QueuePair> inner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PumpLocked();
    if (sent_.empty()) return;
    inner = inner_;
  }
  Completion done[64];
  const size_t n = timeout > absl::ZeroDuration() ? inner->Wait(absl::MakeSpan(done), timeout)
                                                  : inner->Poll(absl::MakeSpan(done));
  std::lock_guard<std::mutex> lock(mu_);
  if (inner != inner_) return;  // Broken meanwhile: its requests were failed.
  RetireLocked({done, n});
  PumpLocked();
}

size_t FaultyQueuePair::Poll(absl::Span<Completion> out) {
  Progress(absl::ZeroDuration());
  std::lock_guard<std::mutex> lock(mu_);
  return TakeLocked(out);
}

size_t FaultyQueuePair::Wait(absl::Span<Completion> out, absl::Duration timeout) {
  const absl::Time deadline = Now() + timeout;
  for (;;) {
    Progress(absl::ZeroDuration());
    absl::Duration step = deadline - Now();
    bool sent = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (size_t n = TakeLocked(out); n > 0) return n;
      if (step <= absl::ZeroDuration()) return 0;
      if (!held_.empty()) step = std::min(step, held_.front().release - Now());
      sent = !sent_.empty();
    }
    if (sent) {
      Progress(std::max(step, absl::Microseconds(1)));
    } else if (clock_) {
      return 0;  // An injected clock advances only as the caller runs.
    } else {
      absl::SleepFor(step);  // Nothing is outstanding but held requests.
    }
  }
}

// Held requests go out only when their queue pair is polled, so while
// delays are injected a wait is cut short for the caller to poll again.
class FaultyChannel final : public CompletionChannel {
 public:
  FaultyChannel(std::shared_ptr<CompletionChannel> inner, absl::Duration longest)
      : inner_(std::move(inner)), longest_(longest) {}
  void Wait(absl::Duration timeout) override { inner_->Wait(std::min(timeout, longest_)); }
  const std::shared_ptr<CompletionChannel>& inner() const { return inner_; }

 private:
  const std::shared_ptr<CompletionChannel> inner_;
  const absl::Duration longest_;
};

class FaultyFabric final : public Fabric {
 public:
  FaultyFabric(std::unique_ptr<Fabric> inner, const FaultOptions& faults, Clock clock)
      : inner_(std::move(inner)), faults_(faults), clock_(std::move(clock)) {}

  FabricKind kind() const override { return inner_->kind(); }
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                               uint32_t access) override {
    return inner_->RegisterMemory(addr, length, access);
  }
  absl::StatusOr<std::unique_ptr<Listener>> Listen(const ListenOptions& options) override {
    return inner_->Listen(options);
  }
  absl::StatusOr<std::shared_ptr<CompletionChannel>> NewCompletionChannel() override {
    absl::StatusOr<std::shared_ptr<CompletionChannel>> inner = inner_->NewCompletionChannel();
    if (!inner.ok()) return inner.status();
    return std::make_shared<FaultyChannel>(*std::move(inner), faults_.delay_probability > 0
                                                                  ? absl::Microseconds(50)
                                                                  : absl::InfiniteDuration());
  }
  absl::StatusOr<std::unique_ptr<QueuePair>> Connect(const Endpoint& endpoint,
                                                     const QueuePairOptions& options) override {
    QueuePairOptions o = options;
    if (o.channel != nullptr) {
      auto* mine = dynamic_cast<FaultyChannel*>(o.channel.get());
      if (mine == nullptr) {
        return absl::InvalidArgumentError("Connect: the completion channel is another fabric's");
      }
      o.channel = mine->inner();
    }
    absl::StatusOr<std::unique_ptr<QueuePair>> qp = inner_->Connect(endpoint, o);
    if (!qp.ok()) return qp.status();
    const uint64_t seed = faults_.seed * 0x9E3779B97F4A7C15ULL + next_qp_.fetch_add(1);
    return std::unique_ptr<QueuePair>(
        std::make_unique<FaultyQueuePair>(std::move(qp).value(), faults_, clock_, seed));
  }

 private:
  const std::unique_ptr<Fabric> inner_;
  const FaultOptions faults_;
  const Clock clock_;
  std::atomic<uint64_t> next_qp_{0};
};

}  // namespace

absl::StatusOr<FaultOptions> ParseFaultOptions(absl::string_view text) {
  FaultOptions faults;
  if (text.empty()) return faults;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("fault spec '", item, "': ", why));
    };
    if (kv.size() != 2) return bad("want name=value");
    const absl::string_view name = kv[0], value = kv[1];
    if (name == "seed") {
      if (!absl::SimpleAtoi(value, &faults.seed)) return bad("seed is not an integer");
    } else if (name == "max_delay") {
      if (!absl::ParseDuration(value, &faults.max_delay) ||
          faults.max_delay <= absl::ZeroDuration() || faults.max_delay > absl::Seconds(10)) {
        return bad("want a duration in (0, 10s], e.g. 2ms");
      }
    } else {
      double p;
      if (!absl::SimpleAtod(value, &p) || p < 0 || p > 1)
        return bad("want a probability in [0, 1]");
      if (name == "delay") {
        faults.delay_probability = p;
      } else if (name == "drop") {
        faults.drop_probability = p;
      } else if (name == "fail") {
        faults.fail_probability = p;
      } else {
        return bad("unknown fault; known: delay, drop, fail, max_delay, seed");
      }
    }
  }
  return faults;
}

std::unique_ptr<Fabric> InjectFaults(std::unique_ptr<Fabric> fabric, const FaultOptions& faults,
                                     Clock clock) {
  return std::make_unique<FaultyFabric>(std::move(fabric), faults, std::move(clock));
}

}  // namespace rkv::fabric
