// A kvserver's side of membership: registers its region with the
// coordinator, renews its lease with heartbeats (reporting usage), and
// carries out what the coordinator orders for its replica group — fence
// (register anew under a new rkey, telling the coordinator the hashes of its
// region's chunks) and push (settle this copy, then send the group's other
// members the chunks they lack; or, serving, copy it live to spares) as a
// PushJob, reporting its progress with each heartbeat. In a replicated
// cluster it also fences the region itself when it cannot renew its lease
// in time: by then the coordinator may have given the group to the other
// members, and a client still reaching this copy must not read or write it.
//
// Every one of those decisions is AgentCore's (agent_core.h). This is its
// shell: the gRPC exchanges with the coordinators, the loop that sleeps
// until the core says the next exchange is due, and the thread that counts
// the region's usage.
#ifndef RKV_SERVER_KVSERVER_MEMBER_AGENT_H_
#define RKV_SERVER_KVSERVER_MEMBER_AGENT_H_

#include <condition_variable>
#include <csignal>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "proto/coordinator_stub.h"
#include "server/kvserver/agent_core.h"
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
  using Counters = AgentCore::Counters;
  Counters counters() const { return core_.counters(); }
  // The region's usage as last counted.
  proto::RegionStats FreshStats();

 private:
  // One register or heartbeat exchange, as the core asks.
  absl::Status Exchange(const AgentRequest& request);
  // Counts the usage every few seconds, and when asked, until the agent goes.
  void CountStats();
  // Asks for a count now.
  void RecountStats();
  absl::Time Now() const { return region_.clock()(); }

  RegionServer& region_;
  CoordinatorStub& coord_;
  // Usage is counted on a thread of its own: a scan of the index and the
  // free pool, which on a large region takes longer than a heartbeat may
  // wait (it used to delay renewals).
  std::mutex stats_mu_;
  std::condition_variable stats_cv_;
  bool stopping_ = false;     // Guarded by stats_mu_.
  bool recount_ = false;      // Guarded by stats_mu_: count now.
  proto::RegionStats stats_;  // Guarded by stats_mu_.
  std::thread stats_thread_;
  AgentCore core_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_MEMBER_AGENT_H_
