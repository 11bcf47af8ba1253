#include "server/kvserver/member_agent.h"

#include <sys/resource.h>
#include <unistd.h>

#include <optional>
#include <utility>

#include "common/logging.h"
#include "common/status.h"

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

}  // namespace

MemberAgent::MemberAgent(std::string id, std::string kind, RegionServer& region,
                         CoordinatorStub& coord, uint64_t copy_rate)
    : region_(region),
      coord_(coord),
      stats_(ToProto(region_.Stats())),
      stats_thread_([this] { CountStats(); }),
      core_({std::move(id), std::move(kind), copy_rate, [this] { return FreshStats(); },
             [this] { RecountStats(); }},
            region) {}

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

absl::Status MemberAgent::Exchange(const AgentRequest& request) {
  if (request.kind == AgentRequest::Kind::kRegister) {
    proto::RegisterResponse resp;
    const grpc::Status s =
        coord_.Call(request.timeout, request.per_try,
                    [&](proto::Coordinator::Stub& stub, grpc::ClientContext& ctx) {
                      return stub.Register(&ctx, request.registration, &resp);
                    });
    const std::string from = coord_.address();
    return core_.OnRegistered(Now(), from, FromGrpc(s, "coordinator " + from), resp);
  }
  proto::HeartbeatResponse resp;
  bool stale = false;
  const grpc::Status s = coord_.Call(
      request.timeout, request.per_try,
      [&](proto::Coordinator::Stub& stub, grpc::ClientContext& ctx) {
        grpc::Status st = stub.Heartbeat(&ctx, request.heartbeat, &resp);
        // A deposed coordinator: on to the next.
        stale = st.ok() && core_.Stale(resp.term());
        return stale ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "a deposed coordinator's term")
                     : st;
      });
  const std::string from = coord_.address();
  return core_.OnHeartbeat(Now(), from, FromGrpc(s, "coordinator " + from), stale, resp);
}

absl::Status MemberAgent::Run(const volatile std::sig_atomic_t* stop) {
  while (!*stop) {
    RKV_RETURN_IF_ERROR(Exchange(core_.Next(Now())));
    while (!*stop && !core_.Due(Now())) absl::SleepFor(absl::Milliseconds(10));
  }
  if (std::optional<proto::DeregisterRequest> dr = core_.Stop()) {
    proto::DeregisterResponse resp;
    (void)coord_.Call(absl::Seconds(1), absl::Milliseconds(500),
                      [&](proto::Coordinator::Stub& stub, grpc::ClientContext& ctx) {
                        return stub.Deregister(&ctx, *dr, &resp);
                      });
  }
  return absl::OkStatus();
}

}  // namespace rkv::server
