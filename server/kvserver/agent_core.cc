#include "server/kvserver/agent_core.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace rkv::server {
namespace {

fabric::RemoteRegion FromProto(const proto::RegionDescriptor& r) {
  return {{r.endpoint().address(), ""}, r.base_address(), r.length(), r.rkey()};
}

PushOrder FromProto(const proto::PushOrder& o) {
  PushOrder order{o.group(), o.config(), o.live(), o.wipe(), {}};
  for (int i = 0; i < o.targets_size(); ++i) {
    const proto::ServerInfo& t = o.targets(i);
    PushOrder::Target& target = order.targets.emplace_back(
        PushOrder::Target{t.id(), FromProto(t.region()), t.region().generation(), {}});
    if (i < o.target_hashes_size()) {
      target.hashes.assign(o.target_hashes(i).hashes().begin(), o.target_hashes(i).hashes().end());
    }
  }
  return order;
}

void ToProto(const PushJob& job, proto::PushProgress* p) {
  const PushOrder& order = job.order();
  const PushProgress progress = job.Progress();
  p->set_group(order.group);
  p->set_config(order.config);
  p->set_copied_bytes(progress.copied_bytes);
  p->set_copy_bytes(progress.copy_bytes);
  p->set_live(order.live);
  for (const PushOrder::Target& t : order.targets) p->add_target_generations(t.generation);
  if (progress.finished) {
    p->set_done(progress.error.empty());
    p->set_error(progress.error);
    p->set_failed_target(progress.failed_target);
  }
}

}  // namespace

AgentCore::AgentCore(Options options, RegionServer& region)
    : options_(std::move(options)), region_(region) {}

AgentRequest AgentCore::Next(absl::Time now) {
  if (replicas_ > 1 && registered_ && now >= FenceBy()) Fence("the lease could not be renewed");
  sent_ = now;
  was_registered_ = registered_;
  AgentRequest r;
  r.timeout = RpcTimeout(now);
  r.per_try = PerTry();
  if (!registered_) {
    r.kind = AgentRequest::Kind::kRegister;
    proto::RegisterRequest& req = r.registration;
    req.set_id(options_.id);
    const fabric::RemoteRegion addr = region_.address();
    proto::RegionDescriptor* d = req.mutable_region();
    d->mutable_endpoint()->set_kind(options_.kind);
    d->mutable_endpoint()->set_address(addr.endpoint.address);
    d->set_base_address(addr.base);
    d->set_length(addr.length);
    d->set_rkey(addr.rkey);
    d->set_generation(region_.generation());
    *req.mutable_stats() = options_.stats();
    req.set_previous_generation(region_.previous_generation());
    for (uint64_t h : chunk_hashes_) req.add_chunk_hashes(h);
    return r;
  }
  r.kind = AgentRequest::Kind::kHeartbeat;
  proto::HeartbeatRequest& req = r.heartbeat;
  req.set_id(options_.id);
  req.set_generation(region_.generation());
  *req.mutable_stats() = options_.stats();
  // A cancelled push carries out no order any more.
  if (push_ != nullptr && !push_->cancelled()) ToProto(*push_, req.mutable_push());
  return r;
}

bool AgentCore::Stale(uint64_t term) {
  // A coordinator of an older term than one this server heard from was
  // deposed: nothing it says counts (it renews no lease, orders nothing).
  if (term >= term_) return false;
  RKV_LOG(WARNING) << "ignored a coordinator of term " << term << " (term " << term_ << " leads)";
  return true;
}

absl::Status AgentCore::OnRegistered(absl::Time now, absl::string_view coordinator,
                                     const absl::Status& s, const proto::RegisterResponse& resp) {
  if (s.ok() && resp.fence_above() != 0) {
    // This server's clock was set back since the generation registered for
    // its id was stamped: it goes above it, and registers again at once.
    Fence("its generation is below the one registered", resp.fence_above());
    return Answered(now, coordinator, s);
  }
  if (s.ok()) {
    // Stored by the coordinator that answered, which led then: its term is
    // the one to follow, even one lower than heard before (its state was
    // started afresh).
    term_ = resp.term();
    registered_ = true;
    chunk_hashes_.clear();  // Pushes change the memory from now on.
    renewed_at_ = sent_;
    lease_ = absl::Milliseconds(resp.lease_ms());
    replicas_ = std::max<uint32_t>(1, resp.replicas());
    // A lone copy takes heap back; a replicated group's primary once the
    // coordinator names it and its backups (OnHeartbeat).
    region_.SetReclaim(replicas_ == 1);
    hurry_ = resp.hurry();
    RKV_LOG(INFO) << "registered with " << coordinator << " (lease " << resp.lease_ms() << " ms, "
                  << replicas_ << (replicas_ == 1 ? " copy" : " copies") << ", map epoch "
                  << resp.epoch() << ", coordinator term " << resp.term() << ")";
  }
  return Answered(now, coordinator, s);
}

absl::Status AgentCore::OnHeartbeat(absl::Time now, absl::string_view coordinator,
                                    const absl::Status& s, bool stale,
                                    const proto::HeartbeatResponse& resp) {
  if (s.code() == absl::StatusCode::kNotFound ||
      s.code() == absl::StatusCode::kFailedPrecondition) {
    RKV_LOG(INFO) << "coordinator does not know this registration; registering again";
    // Replicated, whatever group it was in may have gone on without it.
    if (replicas_ > 1) Fence("the coordinator no longer knows this registration");
    registered_ = false;
    return Answered(now, coordinator, absl::OkStatus());
  }
  if (!s.ok()) {
    // Only older terms heard for a lease: the newer one is gone for good
    // (the control plane's state started afresh). Registering again takes
    // the term that leads now.
    if (stale && now - renewed_at_ > lease_) registered_ = false;
    return Answered(now, coordinator, s);
  }
  term_ = resp.term();
  renewed_at_ = sent_;
  // A reconfiguration of this server's group ended: its region may have
  // been settled, or pushed or copied into. What kvctl shows is counted
  // now, for the next heartbeat, not at the next periodic count.
  if (hurry_ && !resp.hurry()) options_.recount();
  hurry_ = resp.hurry();
  if (replicas_ > 1) {
    std::vector<fabric::RemoteRegion> backups;
    for (const proto::RegionDescriptor& b : resp.census_backups()) backups.push_back(FromProto(b));
    region_.SetReclaim(resp.census(), std::move(backups));
  }
  if (resp.fence()) {
    Fence("ordered by the coordinator");
  } else if (resp.has_push()) {
    StartPush(resp.push());
  } else if (push_ != nullptr) {
    // The order is gone: the group serves, or moved on (a spare copied
    // live went away, say).
    ForgetPush();
  }
  return Answered(now, coordinator, s);
}

absl::Status AgentCore::Answered(absl::Time now, absl::string_view coordinator,
                                 const absl::Status& s) {
  (s.ok() ? renewals_ : renewal_failures_).fetch_add(1, std::memory_order_relaxed);
  NotePush();
  if (s.ok()) {
    if (reported_outage_) RKV_LOG(INFO) << "coordinator " << coordinator << " reachable again";
    reported_outage_ = false;
  } else if (s.code() == absl::StatusCode::kUnauthenticated ||
             s.code() == absl::StatusCode::kInvalidArgument) {
    return absl::Status(s.code(), absl::StrCat("coordinator refused this server: ", s.message()));
  } else if (!reported_outage_) {
    RKV_LOG(WARNING) << s.message() << "; still serving, retrying";
    reported_outage_ = true;
  }
  // Register again at once after a fence or a refused heartbeat.
  if (!registered_ && was_registered_) {
    next_at_ = now;
  } else {
    next_at_ =
        now + (!registered_ ? absl::Milliseconds(500)
               : hurry_     ? absl::Milliseconds(20)
                            : std::max(absl::Milliseconds(50), lease_ / (replicas_ > 1 ? 6 : 3)));
  }
  pushing_ = push_ != nullptr && !push_->finished();
  return absl::OkStatus();
}

bool AgentCore::Due(absl::Time now) const {
  if (now >= next_at_) return true;
  if (pushing_ && push_ != nullptr && push_->finished()) return true;  // Report it at once.
  // Replicated: three quarters of a lease unrenewed, and the coordinator
  // may soon give the group to the other members.
  return replicas_ > 1 && registered_ && now >= FenceBy();
}

std::optional<proto::DeregisterRequest> AgentCore::Stop() {
  if (push_ != nullptr) push_->Cancel();
  // No client is served once the coordinator may have given the group to
  // others.
  region_.StopServing();
  DropPush();
  if (!registered_) return std::nullopt;
  proto::DeregisterRequest dr;
  dr.set_id(options_.id);
  dr.set_generation(region_.generation());
  return dr;
}

AgentCore::Counters AgentCore::counters() const {
  Counters c;
  c.renewals = renewals_.load(std::memory_order_relaxed);
  c.renewal_failures = renewal_failures_.load(std::memory_order_relaxed);
  c.fences = fences_.load(std::memory_order_relaxed);
  for (int kind = 0; kind < 2; ++kind) {
    for (int outcome = 0; outcome < 2; ++outcome) {
      c.pushes[kind][outcome] = pushes_[kind][outcome].load(std::memory_order_relaxed);
    }
    c.push_bytes[kind] = push_bytes_[kind].load(std::memory_order_relaxed);
  }
  c.push_copied_now = push_copied_now_.load(std::memory_order_relaxed);
  c.push_size_now = push_size_now_.load(std::memory_order_relaxed);
  return c;
}

absl::Duration AgentCore::RpcTimeout(absl::Time now) const {
  // Replicated, a heartbeat returns by the time this server must fence
  // itself, three quarters of a lease after the last renewal: before the
  // coordinator, which heard that renewal later, may give its group to
  // the others.
  if (replicas_ > 1 && registered_) {
    return std::clamp(FenceBy() - now, absl::Milliseconds(1), absl::Seconds(2));
  }
  return absl::Seconds(2);
}

absl::Duration AgentCore::PerTry() const {
  // A coordinator that does not answer within a fraction of a lease is
  // left for the next: one paused or lost must not keep this server from
  // reaching the one that leads before it must fence.
  // (A standby leads a third of a lease after the leader fell silent, and
  // a server must be renewed by then plus this, within 7/12 of a lease.)
  if (!registered_) return absl::Milliseconds(500);
  return std::clamp(lease_ / 12, absl::Milliseconds(30), absl::Seconds(1));
}

bool AgentCore::ForgetPush() {
  // A push to a target that does not answer may take long to stop (it
  // drains what it posted): while serving, the exchanges never wait for
  // it, or this server could miss the moment it must fence.
  if (push_ != nullptr && !push_->finished()) {
    push_->Cancel();
    return false;
  }
  DropPush();
  return true;
}

void AgentCore::DropPush() {
  if (push_ == nullptr) return;
  const PushProgress p = push_->Progress();
  const int kind = push_->order().live ? 1 : 0;
  push_bytes_[kind].fetch_add(p.copied_bytes, std::memory_order_relaxed);
  pushes_[kind][p.finished && p.error.empty() ? 0 : 1].fetch_add(1, std::memory_order_relaxed);
  push_.reset();
  NotePush();
}

void AgentCore::NotePush() {
  const PushProgress p = push_ != nullptr ? push_->Progress() : PushProgress{};
  push_copied_now_.store(p.copied_bytes, std::memory_order_relaxed);
  push_size_now_.store(p.copy_bytes, std::memory_order_relaxed);
}

void AgentCore::Fence(const char* why, uint64_t above) {
  // A live copy (which sends from its own staging memory) stops after the
  // region is fenced: the fence must not wait for a target that does not
  // answer. A push of a reconfiguration runs fenced already, and may be
  // settling the memory: it stops first.
  if (push_ != nullptr && push_->order().live) {
    push_->Cancel();
  } else {
    DropPush();
  }
  // A generation stamp, not a deadline: the wall clock, kept above the last
  // and above `above`.
  const uint64_t generation = std::max({region_.generation() + 1, above + 1,
                                        static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()))});
  fences_.fetch_add(1, std::memory_order_relaxed);
  if (absl::Status s = region_.Fence(generation); !s.ok()) {
    // Serving on under the old rkey would let a fenced-out client in.
    RKV_LOG(FATAL) << "cannot fence the region (" << why << "): " << s;
  }
  // Whatever it was is over: nothing of it is reported.
  DropPush();
  // Nothing reaches the memory now but the pusher the coordinator will
  // give the new rkey: what it holds now is what the pusher must correct.
  chunk_hashes_ = region_.ChunkHashes();
  RKV_LOG(INFO) << "fenced the region (" << why << "): generation " << generation;
  registered_ = false;
}

void AgentCore::StartPush(const proto::PushOrder& order) {
  PushOrder wanted = FromProto(order);
  // Under way, or done and reported. One cancelled (its order missing from
  // an answer that renewed only) is started again once it has stopped.
  if (push_ != nullptr && !push_->cancelled() && push_->Carries(wanted)) return;
  if (!ForgetPush()) return;  // The next heartbeat brings the order again.
  push_ = std::make_unique<PushJob>(region_, std::move(wanted),
                                    options_.push_threads ? options_.copy_rate : 0,
                                    options_.push_threads, options_.push_waiting);
}

}  // namespace rkv::server
