// One push a replica group's member carries out for the coordinator, on a
// thread of its own: settle this copy and send the group's other members the
// chunks they lack (a reconfiguration, everyone fenced), or copy the serving
// region live to spares. The member's agent starts it, cancels it, and asks
// for its progress with each heartbeat; destroying it cancels it and waits
// for its thread.
//
// Cancelling does not wait: a push to a target that stopped answering
// drains what it posted before it stops (RegionServer::Push), and the agent
// must stay free to heartbeat and to fence itself in time meanwhile.
#ifndef RKV_SERVER_KVSERVER_PUSH_JOB_H_
#define RKV_SERVER_KVSERVER_PUSH_JOB_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/fabric/fabric.h"
#include "server/kvserver/region_server.h"

namespace rkv::server {

// What the coordinator ordered (its PushOrder, each target with its hashes).
struct PushOrder {
  struct Target {
    std::string id;
    fabric::RemoteRegion region;
    // The registration copied to: a live copy's report counts for it only.
    uint64_t generation = 0;
    // The target's ChunkHashes since it was fenced; empty: copy it whole.
    std::vector<uint64_t> hashes;
  };
  std::string group;
  uint64_t config = 0;
  // Copy the serving region to spares as it is: no settle, nothing fenced.
  bool live = false;
  // Settle from a blank region (a new group).
  bool wipe = false;
  std::vector<Target> targets;
};

struct PushProgress {
  // Bytes brought to agree so far, of copy_bytes.
  uint64_t copied_bytes = 0;
  uint64_t copy_bytes = 0;
  bool finished = false;
  // Once finished: why it failed (empty if it did not), and the target it
  // could not copy to.
  std::string error;
  std::string failed_target;
};

class PushJob {
 public:
  // Starts the push; `copy_rate` caps a live copy's bytes per second (0:
  // no cap). Without `own_thread`, carries it out before returning: the
  // deterministic simulation, whose fabric runs as its one thread waits.
  // `while_waiting`, if set, is called before each wait for the targets'
  // completions, with order().live; true cancels the push.
  PushJob(RegionServer& region, PushOrder order, uint64_t copy_rate, bool own_thread = true,
          std::function<bool(bool live)> while_waiting = {});
  ~PushJob();
  PushJob(const PushJob&) = delete;
  PushJob& operator=(const PushJob&) = delete;

  const PushOrder& order() const { return order_; }
  // Whether `order` is the one this job carries out: the same group,
  // configuration, kind and targets' registrations.
  bool Carries(const PushOrder& order) const { return KeyOf(order) == key_; }

  // Asks the push to stop soon, and returns at once.
  void Cancel() { cancel_ = true; }
  bool cancelled() const { return cancel_.load(); }
  // The thread has ended (done, failed, or cancelled).
  bool finished() const { return finished_.load(); }
  PushProgress Progress() const;

 private:
  static std::string KeyOf(const PushOrder& order);
  void Run();
  // Settles the region unless the copy is live, then sends it to every
  // target in turn; returns the bytes sent.
  absl::StatusOr<uint64_t> SettleAndPush();

  RegionServer& region_;
  const PushOrder order_;
  const std::string key_;
  const uint64_t copy_rate_;
  const uint64_t total_;
  const std::function<bool(bool live)> while_waiting_;
  std::atomic<uint64_t> copied_{0};
  std::atomic<bool> cancel_{false};
  std::atomic<bool> finished_{false};
  std::string error_;          // Written by the thread before finished_.
  std::string failed_target_;  // Likewise: the target it could not copy to.
  std::thread thread_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_PUSH_JOB_H_
