// Every decision of a kvserver's membership, with no I/O of its own: when
// to register and when to heartbeat, what each carries, what an answer
// means (a renewal, an order to fence or to push, a deposed coordinator to
// ignore, a registration the coordinator lost), when the lease is too old
// to serve on, and when the next exchange is due. It is fed the time and
// the coordinator's answers, as etcd's raft package is fed messages and
// ticks; its caller sends what it asks for and sleeps until it is due.
// kvserver's MemberAgent (member_agent.h) is that caller over gRPC and a
// thread; the deterministic simulation calls it directly, in one thread,
// on its own clock and network.
//
// What it does to the node itself — fence the region, settle and push it,
// hand heap back — it does at once, on the RegionServer it is given: those
// are the node's own memory, not messages.
#ifndef RKV_SERVER_KVSERVER_AGENT_CORE_H_
#define RKV_SERVER_KVSERVER_AGENT_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rkvpb/coordinator.pb.h"
#include "server/kvserver/push_job.h"
#include "server/kvserver/region_server.h"

namespace rkv::server {

// What to send the coordinator next: a registration or a heartbeat, with
// how long the whole exchange may take and how long each coordinator of
// the list is given.
struct AgentRequest {
  enum class Kind { kRegister, kHeartbeat };
  Kind kind = Kind::kRegister;
  proto::RegisterRequest registration;
  proto::HeartbeatRequest heartbeat;
  absl::Duration timeout;
  absl::Duration per_try;
};

class AgentCore {
 public:
  struct Options {
    std::string id;
    std::string kind;  // The fabric's, as the map names it.
    // A ceiling in bytes per second on live copies to spares (0: none).
    uint64_t copy_rate = 0;
    // The region's usage as last counted (what a registration and a
    // heartbeat report), and a request to count it again soon.
    std::function<proto::RegionStats()> stats;
    std::function<void()> recount;
    // Whether pushes run on threads of their own (PushJob); false: each is
    // carried out when ordered, for the simulation's one thread, and with
    // no copy_rate (its ceiling waits for a clock that an inline push does
    // not move).
    bool push_threads = true;
    // Without push threads: called at each wait of a push for its
    // targets' completions (with whether it is a live copy), where the
    // simulation lets its other nodes work during the push; true cancels
    // the push there.
    std::function<bool(bool live)> push_waiting;
  };

  AgentCore(Options options, RegionServer& region);
  AgentCore(const AgentCore&) = delete;
  AgentCore& operator=(const AgentCore&) = delete;

  // The exchange to make now. Replicated, a lease that can no longer be
  // renewed in time fences the region first, and the request is then a
  // registration.
  AgentRequest Next(absl::Time now);
  // Whether an answer of a coordinator of `term` must be ignored: one of
  // an older term than this server heard from was deposed. The caller then
  // asks the next coordinator, as if this one had not answered.
  bool Stale(uint64_t term);
  // The outcome, at `now`, of the exchange the last Next asked for: `s`
  // (not OK: no coordinator answered, or its error) and the answer of
  // `coordinator` (its address, for the logs). `stale`: only deposed
  // coordinators answered a heartbeat. An error return: the coordinator
  // refuses this server for good (a wrong token, a bad request); its
  // caller stops.
  absl::Status OnRegistered(absl::Time now, absl::string_view coordinator, const absl::Status& s,
                            const proto::RegisterResponse& resp);
  absl::Status OnHeartbeat(absl::Time now, absl::string_view coordinator, const absl::Status& s,
                           bool stale, const proto::HeartbeatResponse& resp);
  // Whether the next exchange is due by `now`: its interval passed, a push
  // just finished (reported at once), or the lease must be given up.
  bool Due(absl::Time now) const;
  // Stops: cancels the push, stops serving (no client is served once the
  // coordinator may have given the group to others), and returns the
  // deregistration to send, if any.
  std::optional<proto::DeregisterRequest> Stop();

  bool registered() const { return registered_; }
  uint32_t replicas() const { return replicas_; }
  absl::Duration lease() const { return lease_; }
  // Replicated: when this server must have fenced itself, unless renewed:
  // a quarter lease before the coordinator, which heard the renewal later,
  // can declare the lease lost.
  absl::Time FenceBy() const { return renewed_at_ + lease_ * 3 / 4; }

  // For /metrics; thread-safe.
  struct Counters {
    uint64_t renewals = 0;          // Heartbeats the coordinator answered.
    uint64_t renewal_failures = 0;  // Exchanges that failed (an outage).
    uint64_t fences = 0;            // Of this server's region.
    // Pushes this server made, [reconfiguration, live copy] x [done,
    // failed or cancelled], and the bytes they brought to agree.
    uint64_t pushes[2][2] = {};
    uint64_t push_bytes[2] = {};
    // The push under way (0 when none): bytes done, of its size.
    uint64_t push_copied_now = 0;
    uint64_t push_size_now = 0;
  };
  Counters counters() const;

 private:
  // Fences the region under a new generation: above the last and `above`.
  void Fence(const char* why, uint64_t above = 0);
  void StartPush(const proto::PushOrder& order);
  // Drops the push if its thread has ended; otherwise only cancels it,
  // without waiting, and returns false.
  bool ForgetPush();
  // Counts the push, then drops it.
  void DropPush();
  // Notes the progress of the push under way, for counters().
  void NotePush();
  // Counts an exchange, logs an outage once and its end, and schedules the
  // next exchange; an error when the coordinator refused this server.
  absl::Status Answered(absl::Time now, absl::string_view coordinator, const absl::Status& s);
  absl::Duration RpcTimeout(absl::Time now) const;
  // How long one coordinator of the list is given to answer.
  absl::Duration PerTry() const;

  const Options options_;
  RegionServer& region_;

  bool registered_ = false;
  // Taken after the last fence, sent with the registration that follows.
  std::vector<uint64_t> chunk_hashes_;
  uint32_t replicas_ = 1;
  // The newest coordinator term heard from: a coordinator of an older one
  // was deposed, and its renewals and orders are refused.
  uint64_t term_ = 0;
  absl::Duration lease_ = absl::Seconds(3);
  // When the last exchange that renewed the lease was sent: the lease
  // holds until then + lease_ at the coordinator, which heard it later.
  absl::Time renewed_at_ = absl::InfinitePast();
  // The coordinator wants the next heartbeat soon (a reconfiguration).
  bool hurry_ = false;
  bool reported_outage_ = false;
  // When the last Next was asked, and whether the server was registered then.
  absl::Time sent_ = absl::InfinitePast();
  bool was_registered_ = false;
  absl::Time next_at_ = absl::InfinitePast();
  // A push was under way when the last exchange was made: its end is
  // reported at once.
  bool pushing_ = false;

  std::atomic<uint64_t> renewals_{0};
  std::atomic<uint64_t> renewal_failures_{0};
  std::atomic<uint64_t> fences_{0};
  std::atomic<uint64_t> pushes_[2][2] = {};
  std::atomic<uint64_t> push_bytes_[2] = {};
  std::atomic<uint64_t> push_copied_now_{0};
  std::atomic<uint64_t> push_size_now_{0};

  // The push under way, or finished and not yet forgotten (a finished
  // push is reported until the coordinator's order goes). Destroying it
  // cancels it and waits for its thread.
  std::unique_ptr<PushJob> push_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_AGENT_CORE_H_
