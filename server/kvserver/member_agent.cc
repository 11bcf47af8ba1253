#include "server/kvserver/member_agent.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "common/logging.h"

namespace rkv::server {
namespace {

// Usage (kvctl status) is counted by scanning the whole index and walking
// the free pool: a few percent of a core for a large region if done at
// every heartbeat, so it is counted this often.
constexpr absl::Duration kStatsEvery = absl::Seconds(5);

proto::RegionStats ToProto(const RegionStats& s) {
  proto::RegionStats p;
  p.set_slots_total(s.slots_total);
  p.set_slots_used(s.slots_used);
  p.set_heap_bytes(s.heap_bytes);
  p.set_heap_used(s.heap_used);
  p.set_heap_live(s.heap_live);
  p.set_heap_pooled(s.heap_pooled);
  p.set_heap_pool_partial(s.heap_pool_partial);
  p.set_client_sessions(s.sessions);
  p.set_client_sessions_fenced(s.sessions_fenced);
  p.set_heap_reclaimed(s.heap_reclaimed);
  return p;
}

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

MemberAgent::MemberAgent(std::string id, std::string kind, RegionServer& region,
                         CoordinatorStub& coord, uint64_t copy_rate)
    : id_(std::move(id)),
      kind_(std::move(kind)),
      region_(region),
      coord_(coord),
      copy_rate_(copy_rate),
      stats_(ToProto(region_.Stats())),
      stats_thread_([this] { CountStats(); }) {}

MemberAgent::~MemberAgent() {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stopping_ = true;
  }
  stats_cv_.notify_all();
  stats_thread_.join();
}

void MemberAgent::CountStats() {
  // Background work: on a busy machine the heartbeats and the fabric's
  // threads come first (Linux takes a nice value per thread).
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  std::unique_lock<std::mutex> lock(stats_mu_);
  for (;;) {
    stats_cv_.wait_for(lock, absl::ToChronoMilliseconds(kStatsEvery),
                       [this] { return stopping_ || recount_; });
    if (stopping_) return;
    recount_ = false;
    lock.unlock();
    proto::RegionStats counted = ToProto(region_.Stats());
    lock.lock();
    stats_ = std::move(counted);
  }
}

MemberAgent::Counters MemberAgent::counters() const {
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

void MemberAgent::RecountStats() {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    recount_ = true;
  }
  stats_cv_.notify_all();
}

proto::RegionStats MemberAgent::FreshStats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

absl::Duration MemberAgent::RpcTimeout() const {
  // Replicated, a heartbeat returns by the time this server must fence
  // itself, three quarters of a lease after the last renewal: before the
  // coordinator, which heard that renewal later, may give its group to
  // the others.
  if (replicas_ > 1 && registered_) {
    return std::clamp(FenceBy() - Now(), absl::Milliseconds(1), absl::Seconds(2));
  }
  return absl::Seconds(2);
}

bool MemberAgent::ForgetPush() {
  // A push to a target that does not answer may take long to stop (it
  // drains what it posted): while serving, the heartbeat thread never
  // waits for it, or this server could miss the moment it must fence.
  if (push_ != nullptr && !push_->finished()) {
    push_->Cancel();
    return false;
  }
  DropPush();
  return true;
}

void MemberAgent::DropPush() {
  if (push_ == nullptr) return;
  const PushProgress p = push_->Progress();
  const int kind = push_->order().live ? 1 : 0;
  push_bytes_[kind].fetch_add(p.copied_bytes, std::memory_order_relaxed);
  pushes_[kind][p.finished && p.error.empty() ? 0 : 1].fetch_add(1, std::memory_order_relaxed);
  push_.reset();
  NotePush();
}

void MemberAgent::NotePush() {
  const PushProgress p = push_ != nullptr ? push_->Progress() : PushProgress{};
  push_copied_now_.store(p.copied_bytes, std::memory_order_relaxed);
  push_size_now_.store(p.copy_bytes, std::memory_order_relaxed);
}

void MemberAgent::Fence(const char* why) {
  // A live copy (which sends from its own staging memory) stops after the
  // region is fenced: the fence must not wait for a target that does not
  // answer. A push of a reconfiguration runs fenced already, and may be
  // settling the memory: it stops first.
  if (push_ != nullptr && push_->order().live) {
    push_->Cancel();
  } else {
    DropPush();
  }
  const uint64_t generation =
      std::max(region_.generation() + 1, static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())));
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

void MemberAgent::StartPush(const proto::PushOrder& order) {
  PushOrder wanted = FromProto(order);
  if (push_ != nullptr && push_->Carries(wanted)) return;  // Under way, or done and reported.
  if (!ForgetPush()) return;  // The next heartbeat brings the order again.
  push_ = std::make_unique<PushJob>(region_, std::move(wanted), copy_rate_);
}

absl::Duration MemberAgent::PerTry() const {
  // A coordinator that does not answer within a fraction of a lease is
  // left for the next: one paused or lost must not keep this server from
  // reaching the one that leads before it must fence.
  // (A standby leads a third of a lease after the leader fell silent, and
  // a server must be renewed by then plus this, within 7/12 of a lease.)
  if (!registered_) return absl::Milliseconds(500);
  return std::clamp(lease_ / 12, absl::Milliseconds(30), absl::Seconds(1));
}

bool MemberAgent::Stale(uint64_t term) {
  // A coordinator of an older term than one this server heard from was
  // deposed: nothing it says counts (it renews no lease, orders nothing).
  if (term >= term_) return false;
  RKV_LOG(WARNING) << "ignored a coordinator of term " << term << " (term " << term_ << " leads)";
  return true;
}

grpc::Status MemberAgent::Exchange() {
  const absl::Time sent = Now();
  if (!registered_) {
    proto::RegisterRequest req;
    req.set_id(id_);
    const fabric::RemoteRegion addr = region_.address();
    proto::RegionDescriptor* d = req.mutable_region();
    d->mutable_endpoint()->set_kind(kind_);
    d->mutable_endpoint()->set_address(addr.endpoint.address);
    d->set_base_address(addr.base);
    d->set_length(addr.length);
    d->set_rkey(addr.rkey);
    d->set_generation(region_.generation());
    *req.mutable_stats() = FreshStats();
    req.set_previous_generation(region_.previous_generation());
    for (uint64_t h : chunk_hashes_) req.add_chunk_hashes(h);
    proto::RegisterResponse resp;
    grpc::Status s = coord_.Call(RpcTimeout(), PerTry(),
                                 [&](proto::Coordinator::Stub& stub, grpc::ClientContext& ctx) {
                                   return stub.Register(&ctx, req, &resp);
                                 });
    if (!s.ok()) return s;
    // Stored by the coordinator that answered, which led then: its term is
    // the one to follow, even one lower than heard before (its state was
    // started afresh).
    term_ = resp.term();
    registered_ = true;
    chunk_hashes_.clear();  // Pushes change the memory from now on.
    renewed_at_ = sent;
    lease_ = absl::Milliseconds(resp.lease_ms());
    replicas_ = std::max<uint32_t>(1, resp.replicas());
    // A lone copy takes heap back; a replicated group's primary once the
    // coordinator names it and its backups (below).
    region_.SetReclaim(replicas_ == 1);
    hurry_ = resp.hurry();
    RKV_LOG(INFO) << "registered with " << coord_.address() << " (lease " << resp.lease_ms()
                  << " ms, " << replicas_ << (replicas_ == 1 ? " copy" : " copies")
                  << ", map epoch " << resp.epoch() << ", coordinator term " << resp.term() << ")";
    return s;
  }
  proto::HeartbeatRequest req;
  req.set_id(id_);
  req.set_generation(region_.generation());
  *req.mutable_stats() = FreshStats();
  // A cancelled push carries out no order any more.
  if (push_ != nullptr && !push_->cancelled()) ToProto(*push_, req.mutable_push());
  proto::HeartbeatResponse resp;
  bool stale = false;
  grpc::Status s = coord_.Call(
      RpcTimeout(), PerTry(), [&](proto::Coordinator::Stub& stub, grpc::ClientContext& ctx) {
        grpc::Status st = stub.Heartbeat(&ctx, req, &resp);
        // A deposed coordinator: on to the next.
        stale = st.ok() && Stale(resp.term());
        return stale ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "a deposed coordinator's term")
                     : st;
      });
  if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
      s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    RKV_LOG(INFO) << "coordinator does not know this registration; registering again";
    // Replicated, whatever group it was in may have gone on without it.
    if (replicas_ > 1) Fence("the coordinator no longer knows this registration");
    registered_ = false;
    return grpc::Status::OK;
  }
  if (!s.ok()) {
    // Only older terms heard for a lease: the newer one is gone for good
    // (the control plane's state started afresh). Registering again takes
    // the term that leads now.
    if (stale && Now() - renewed_at_ > lease_) registered_ = false;
    return s;
  }
  term_ = resp.term();
  renewed_at_ = sent;
  // A reconfiguration of this server's group ended: its region may have
  // been settled, or pushed or copied into. What kvctl shows is counted
  // now, for the next heartbeat, not up to kStatsEvery later.
  if (hurry_ && !resp.hurry()) RecountStats();
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
  return s;
}

absl::Status MemberAgent::Run(const volatile std::sig_atomic_t* stop) {
  bool reported_outage = false;
  while (!*stop) {
    const bool was_registered = registered_;
    if (replicas_ > 1 && registered_ && Now() >= FenceBy()) {
      Fence("the lease could not be renewed");
      continue;
    }
    grpc::Status s = Exchange();
    (s.ok() ? renewals_ : renewal_failures_).fetch_add(1, std::memory_order_relaxed);
    NotePush();
    if (s.ok()) {
      if (reported_outage)
        RKV_LOG(INFO) << "coordinator " << coord_.address() << " reachable again";
      reported_outage = false;
    } else if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
               s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return FromGrpc(s, "coordinator refused this server");
    } else if (!reported_outage) {
      RKV_LOG(WARNING) << "coordinator " << coord_.address() << ": " << s.error_message()
                       << "; still serving, retrying";
      reported_outage = true;
    }
    // Register again at once after a fence or a refused heartbeat.
    if (!registered_ && was_registered) continue;
    const absl::Duration interval =
        !registered_ ? absl::Milliseconds(500)
        : hurry_     ? absl::Milliseconds(20)
                     : std::max(absl::Milliseconds(50), lease_ / (replicas_ > 1 ? 6 : 3));
    const absl::Time until = Now() + interval;
    const bool pushing = push_ != nullptr && !push_->finished();
    while (!*stop && Now() < until) {
      if (pushing && push_->finished()) break;  // Report it at once.
      // Replicated: three quarters of a lease unrenewed, and the
      // coordinator may soon give the group to the other members.
      if (replicas_ > 1 && registered_ && Now() >= FenceBy()) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  if (push_ != nullptr) push_->Cancel();
  // No client is served once the coordinator may have given the group to
  // others.
  region_.StopServing();
  DropPush();
  if (registered_) {
    proto::DeregisterRequest dr;
    dr.set_id(id_);
    dr.set_generation(region_.generation());
    proto::DeregisterResponse resp;
    (void)coord_.Call(absl::Seconds(1), absl::Milliseconds(500),
                      [&](proto::Coordinator::Stub& stub, grpc::ClientContext& ctx) {
                        return stub.Deregister(&ctx, dr, &resp);
                      });
  }
  return absl::OkStatus();
}

}  // namespace rkv::server
