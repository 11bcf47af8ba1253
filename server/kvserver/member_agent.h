// A kvserver's side of membership: registers its region with the
// coordinator, renews its lease with heartbeats (reporting usage), and
// carries out what the coordinator orders for its replica group — fence
// (register anew under a new rkey, telling the coordinator the hashes of its
// region's chunks) and push (settle this copy, then send the group's other
// members the chunks they lack; or, serving, copy it live to spares) as a
// PushJob, reporting its progress with each heartbeat. In a replicated cluster it also fences
// the region itself when it cannot renew its lease in time: by then the coordinator may have given
// the group to the other members, and a client still reaching this copy must not read or write it.
#ifndef RKV_SERVER_KVSERVER_MEMBER_AGENT_H_
#define RKV_SERVER_KVSERVER_MEMBER_AGENT_H_

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/coordinator_stub.h"
#include "server/kvserver/push_job.h"
#include "server/kvserver/region_server.h"

namespace rkv::server {

class MemberAgent {
 public:
  // `copy_rate`: a ceiling in bytes per second on live copies to spares,
  // which share the fabric with clients (0: none).
  MemberAgent(std::string id, std::string kind, RegionServer& region, CoordinatorStub& coord,
              uint64_t copy_rate = 0);
  ~MemberAgent();
  MemberAgent(const MemberAgent&) = delete;
  MemberAgent& operator=(const MemberAgent&) = delete;

  // Runs until *stop is set, then deregisters. An error when the
  // coordinator refuses this server for good (wrong token, bad request).
  absl::Status Run(const volatile std::sig_atomic_t* stop);

  // For /metrics (server_metrics.h); thread-safe.
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
  // The region's usage as last counted.
  proto::RegionStats FreshStats();

 private:
  // One register or heartbeat exchange.
  grpc::Status Exchange();
  void Fence(const char* why);
  void StartPush(const proto::PushOrder& order);
  // Drops the push if its thread has ended; otherwise only cancels it,
  // without waiting, and returns false.
  bool ForgetPush();
  // Counts the push, then drops it.
  void DropPush();
  // Notes the progress of the push under way, for counters().
  void NotePush();
  // Counts the usage every few seconds, and when asked, until the agent goes.
  void CountStats();
  // Asks for a count now.
  void RecountStats();
  absl::Duration RpcTimeout() const;
  // How long one coordinator of the list is given to answer.
  absl::Duration PerTry() const;
  // The node's monotonic clock (the region's): leases never see a step of
  // the wall clock.
  absl::Time Now() const { return region_.clock()(); }
  // Whether a coordinator of `term` was deposed (see term_).
  bool Stale(uint64_t term);

  const std::string id_;
  const std::string kind_;
  RegionServer& region_;
  CoordinatorStub& coord_;
  const uint64_t copy_rate_;

  bool registered_ = false;
  // Taken after the last fence, sent with the registration that follows.
  std::vector<uint64_t> chunk_hashes_;
  uint32_t replicas_ = 1;
  // The newest coordinator term heard from: a coordinator of an older one
  // was deposed, and its renewals and orders are refused.
  uint64_t term_ = 0;
  absl::Duration lease_ = absl::Seconds(3);
  // When the last heartbeat that renewed the lease was sent: the lease
  // holds until then + lease_ at the coordinator, which heard it later.
  absl::Time renewed_at_ = absl::InfinitePast();  // On the region's clock, as FenceBy.
  // Replicated: when this server must have fenced itself, unless renewed:
  // a quarter lease before the coordinator, which heard the renewal later,
  // can declare the lease lost.
  absl::Time FenceBy() const { return renewed_at_ + lease_ * 3 / 4; }
  // The coordinator wants the next heartbeat soon (a reconfiguration).
  bool hurry_ = false;
  std::atomic<uint64_t> renewals_{0};
  std::atomic<uint64_t> renewal_failures_{0};
  std::atomic<uint64_t> fences_{0};
  std::atomic<uint64_t> pushes_[2][2] = {};
  std::atomic<uint64_t> push_bytes_[2] = {};
  std::atomic<uint64_t> push_copied_now_{0};
  std::atomic<uint64_t> push_size_now_{0};
  // Usage is counted on a thread of its own: a scan of the index and the
  // free pool, which on a large region takes longer than a heartbeat may
  // wait (it used to delay renewals).
  std::mutex stats_mu_;
  std::condition_variable stats_cv_;
  bool stopping_ = false;     // Guarded by stats_mu_.
  bool recount_ = false;      // Guarded by stats_mu_: count now.
  proto::RegionStats stats_;  // Guarded by stats_mu_.
  std::thread stats_thread_;

  // The push under way, or finished and not yet forgotten (a finished
  // push is reported until the coordinator's order goes). Destroying it
  // cancels it and waits for its thread.
  std::unique_ptr<PushJob> push_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_MEMBER_AGENT_H_
