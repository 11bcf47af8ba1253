#include "server/kvserver/member_agent.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"

namespace rkv::server {
namespace {

// Usage (kvctl status) is counted by scanning the whole index: a few
// percent of a core for a large region if done at every heartbeat, so it
// is refreshed at most this often.
constexpr absl::Duration kStatsEvery = absl::Seconds(2);

proto::RegionStats ToProto(const RegionStats& s) {
  proto::RegionStats p;
  p.set_slots_total(s.slots_total);
  p.set_slots_used(s.slots_used);
  p.set_heap_bytes(s.heap_bytes);
  p.set_heap_used(s.heap_used);
  return p;
}

fabric::RemoteRegion FromProto(const proto::RegionDescriptor& r) {
  return {{r.endpoint().address(), ""}, r.base_address(), r.length(), r.rkey()};
}

}  // namespace

MemberAgent::MemberAgent(std::string id, std::string kind, RegionServer& region,
                         CoordinatorStub& coord, uint64_t copy_rate)
    : id_(std::move(id)),
      kind_(std::move(kind)),
      region_(region),
      coord_(coord),
      copy_rate_(copy_rate) {}

MemberAgent::~MemberAgent() { StopPush(); }

proto::RegionStats MemberAgent::FreshStats() {
  if (absl::Now() - stats_at_ >= kStatsEvery) {
    stats_ = ToProto(region_.Stats());
    stats_at_ = absl::Now();
  }
  return stats_;
}

absl::Duration MemberAgent::RpcTimeout() const {
  // Replicated, a heartbeat returns by the time this server must fence
  // itself, three quarters of a lease after the last renewal: before the
  // coordinator, which heard that renewal later, may give its group to
  // the others.
  if (replicas_ > 1 && registered_) {
    return std::clamp(FenceBy() - MonotonicNow(), absl::Milliseconds(1), absl::Seconds(2));
  }
  return absl::Seconds(2);
}

void MemberAgent::StopPush() {
  if (!pusher_.joinable()) return;
  cancel_push_ = true;
  pusher_.join();
  cancel_push_ = false;
}

bool MemberAgent::ForgetPush() {
  // A push to a target that does not answer may take long to stop (it
  // drains what it posted): while serving, the heartbeat thread never
  // waits for it, or this server could miss the moment it must fence.
  if (pusher_.joinable() && !push_done_.load()) {
    cancel_push_ = true;
    return false;
  }
  StopPush();
  push_key_.clear();
  push_group_.clear();
  push_config_ = 0;
  return true;
}

void MemberAgent::Fence(const char* why) {
  // A live copy (which sends from its own staging memory) stops after the
  // region is fenced: the fence must not wait for a target that does not
  // answer. A push of a reconfiguration runs fenced already, and may be
  // settling the memory: it stops first.
  if (push_live_) {
    cancel_push_ = pusher_.joinable();
  } else {
    StopPush();
  }
  const uint64_t generation =
      std::max(region_.generation() + 1, static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())));
  if (absl::Status s = region_.Fence(generation); !s.ok()) {
    // Serving on under the old rkey would let a fenced-out client in.
    RKV_LOG(FATAL) << "cannot fence the region (" << why << "): " << s;
  }
  // Whatever it was is over: nothing of it is reported.
  StopPush();
  ForgetPush();
  // Nothing reaches the memory now but the pusher the coordinator will
  // give the new rkey: what it holds now is what the pusher must correct.
  chunk_hashes_ = region_.ChunkHashes();
  RKV_LOG(INFO) << "fenced the region (" << why << "): generation " << generation;
  registered_ = false;
}

void MemberAgent::StartPush(const proto::PushOrder& order) {
  std::string key = absl::StrCat(order.group(), "/", order.config(), order.live() ? "/live" : "");
  for (const proto::ServerInfo& t : order.targets()) {
    absl::StrAppend(&key, "/", t.id(), ":", t.region().generation());
  }
  if (key == push_key_) return;  // Under way, or done and reported.
  if (!ForgetPush()) return;     // The next heartbeat brings the order again.
  push_key_ = std::move(key);
  push_group_ = order.group();
  push_config_ = order.config();
  push_live_ = order.live();
  push_target_generations_.clear();
  push_copied_ = 0;
  push_done_ = false;
  push_error_.clear();
  push_failed_target_.clear();
  struct Target {
    std::string id;
    fabric::RemoteRegion region;
    std::vector<uint64_t> hashes;
  };
  std::vector<Target> targets;
  std::string names;
  for (int i = 0; i < order.targets_size(); ++i) {
    const proto::ServerInfo& t = order.targets(i);
    Target& target = targets.emplace_back(Target{t.id(), FromProto(t.region()), {}});
    push_target_generations_.push_back(t.region().generation());
    if (i < order.target_hashes_size()) {
      target.hashes.assign(order.target_hashes(i).hashes().begin(),
                           order.target_hashes(i).hashes().end());
    }
    absl::StrAppend(&names, names.empty() ? "" : ",", t.id());
  }
  push_total_ = region_.PushBytes() * targets.size();
  RKV_LOG(INFO) << "group " << order.group() << " config " << order.config() << ": "
                << (order.live()
                        ? absl::StrCat("copying this serving region live to ", names)
                        : absl::StrCat("settling", order.wipe() ? " a blank region" : " this copy",
                                       targets.empty() ? "" : " and pushing it to " + names));
  pusher_ = std::thread([this, targets = std::move(targets), live = order.live(),
                         wipe = order.wipe()] {
    const absl::Time start = absl::Now();
    absl::Status s = live ? absl::OkStatus() : region_.Settle(wipe);
    uint64_t sent = 0;
    const RegionServer::PushControl control{&push_copied_, &cancel_push_, live ? copy_rate_ : 0};
    for (const Target& t : targets) {
      if (!s.ok()) break;
      absl::StatusOr<uint64_t> n = region_.Push(t.region, t.hashes, control);
      if (n.ok()) {
        sent += *n;
      } else {
        s = n.status();
        push_failed_target_ = t.id;
      }
    }
    if (!s.ok()) {
      push_error_ = std::string(s.message());
      RKV_LOG(WARNING) << "push for group " << push_group_ << " failed: " << s;
    } else {
      RKV_LOG(INFO) << "push for group " << push_group_ << " done: " << (sent >> 10)
                    << " KiB sent of " << (push_total_ >> 10) << " KiB in " << absl::Now() - start;
    }
    push_done_ = true;
  });
}

grpc::Status MemberAgent::Exchange() {
  grpc::ClientContext ctx;
  coord_.Prepare(&ctx, RpcTimeout());
  const absl::Time sent = MonotonicNow();
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
    grpc::Status s = coord_.stub().Register(&ctx, req, &resp);
    if (!s.ok()) return s;
    registered_ = true;
    chunk_hashes_.clear();  // Pushes change the memory from now on.
    renewed_at_ = sent;
    lease_ = absl::Milliseconds(resp.lease_ms());
    replicas_ = std::max<uint32_t>(1, resp.replicas());
    hurry_ = resp.hurry();
    RKV_LOG(INFO) << "registered with " << coord_.address() << " (lease " << resp.lease_ms()
                  << " ms, " << replicas_ << (replicas_ == 1 ? " copy" : " copies")
                  << ", map epoch " << resp.epoch() << ")";
    return s;
  }
  proto::HeartbeatRequest req;
  req.set_id(id_);
  req.set_generation(region_.generation());
  *req.mutable_stats() = FreshStats();
  if (!push_group_.empty() && !cancel_push_.load()) {
    proto::PushProgress* p = req.mutable_push();
    p->set_group(push_group_);
    p->set_config(push_config_);
    p->set_copied_bytes(push_copied_.load());
    p->set_copy_bytes(push_total_);
    p->set_live(push_live_);
    for (uint64_t g : push_target_generations_) p->add_target_generations(g);
    if (push_done_.load()) {
      p->set_done(push_error_.empty());
      p->set_error(push_error_);
      p->set_failed_target(push_failed_target_);
    }
  }
  proto::HeartbeatResponse resp;
  grpc::Status s = coord_.stub().Heartbeat(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
      s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    RKV_LOG(INFO) << "coordinator does not know this registration; registering again";
    // Replicated, whatever group it was in may have gone on without it.
    if (replicas_ > 1) Fence("the coordinator no longer knows this registration");
    registered_ = false;
    return grpc::Status::OK;
  }
  if (!s.ok()) return s;
  renewed_at_ = sent;
  hurry_ = resp.hurry();
  if (resp.fence()) {
    Fence("ordered by the coordinator");
  } else if (resp.has_push()) {
    StartPush(resp.push());
  } else if (!push_group_.empty()) {
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
    if (replicas_ > 1 && registered_ && MonotonicNow() >= FenceBy()) {
      Fence("the lease could not be renewed");
      continue;
    }
    grpc::Status s = Exchange();
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
    const absl::Time until = MonotonicNow() + interval;
    const bool pushing = pusher_.joinable() && !push_done_.load();
    while (!*stop && MonotonicNow() < until) {
      if (pushing && push_done_.load()) break;  // Report it at once.
      // Replicated: three quarters of a lease unrenewed, and the
      // coordinator may soon give the group to the other members.
      if (replicas_ > 1 && registered_ && MonotonicNow() >= FenceBy()) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  cancel_push_ = pusher_.joinable();
  // No client is served once the coordinator may have given the group to
  // others.
  region_.StopServing();
  StopPush();
  if (registered_) {
    grpc::ClientContext ctx;
    coord_.Prepare(&ctx, absl::Seconds(1));
    proto::DeregisterRequest dr;
    dr.set_id(id_);
    dr.set_generation(region_.generation());
    proto::DeregisterResponse resp;
    (void)coord_.stub().Deregister(&ctx, dr, &resp);
  }
  return absl::OkStatus();
}

}  // namespace rkv::server
