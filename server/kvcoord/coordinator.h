// kvcoord's core: who is in the cluster, where their regions are, and
// whether their leases hold. Every decision of the coordinator is here,
// with no gRPC: CoordinatorService (coordinator_service.h) is the thin
// shell kvcoord serves it through, and the deterministic simulation calls
// it directly, in one thread, on its own clock. The state (membership, replica groups,
// the map's epoch) lives in a StateStore: etcd, where several coordinators
// share it — one leads, the others stand by with it warm and serve the map
// — or a file or memory for one process alone.
//
// Only the leader renews leases and changes the state, and only while its
// leadership is certain (state_store.h). Leases are not stored: a
// coordinator that starts to lead counts every server's lease from that
// moment, so that it takes no server away before any lease the previous
// leader granted has run out. Every change is stored before it is shown to
// anyone or acted on; a change the store refuses (another coordinator
// leads, etcd has no quorum) is undone, and tried again when whatever
// caused it happens again (the next heartbeat, the next lease tick).
#ifndef RKV_SERVER_KVCOORD_COORDINATOR_H_
#define RKV_SERVER_KVCOORD_COORDINATOR_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/monotonic_clock.h"
#include "common/prometheus_text.h"
#include "rkvpb/coordinator.pb.h"
#include "server/kvcoord/replica_groups.h"
#include "server/kvcoord/state_store.h"

namespace rkv::server {

// The payload of a refusal by a coordinator that does not lead: the
// leader's address, when known (the gRPC shell hands it on as metadata).
inline constexpr char kLeaderPayload[] = "rkv-leader";

struct CoordinatorOptions {
  absl::Duration lease = absl::Seconds(3);
  uint32_t replicas = 1;
  // What leases and the leadership are timed on (empty: the machine's
  // monotonic clock); the store's leadership() must be on the same one.
  Clock clock;
  // Whether a thread of the service marks down the servers whose lease
  // ran out; false: its owner calls CheckLeases (the deterministic
  // simulation, on its own clock).
  bool lease_thread = true;
  // Accept regions on the deterministic simulation's fabric (addresses
  // "sim:NAME"); kvcoord never does.
  bool simulated_fabric = false;
};

class Coordinator final : private StateStore::Listener {
 public:
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Starts with `store`: with a file, reads it and leads at once; with
  // etcd, follows until elected. `id` and `address` name this coordinator
  // (kvctl status shows them; a standby names the leader's address), known
  // only once gRPC has bound its port: until Start every call is answered
  // UNAVAILABLE. An error when the stored state cannot be used.
  absl::Status Start(std::string id, std::string address, std::unique_ptr<StateStore> store);
  // Not OK once the store turned out to hold another cluster's state (a
  // different number of copies): kvcoord then stops.
  absl::Status status() const;
  // Ends open watches and hands leadership on; call before shutting the
  // gRPC server down.
  void Stop();

  // The calls of the Coordinator service (rkvpb/coordinator.proto). A
  // coordinator that does not lead refuses what only the leader does with
  // UNAVAILABLE, and names the leader it knows (kLeaderPayload).
  absl::Status Register(const proto::RegisterRequest& req, proto::RegisterResponse* resp);
  absl::Status Heartbeat(const proto::HeartbeatRequest& req, proto::HeartbeatResponse* resp);
  absl::Status Deregister(const proto::DeregisterRequest& req);
  absl::Status GetClusterMap(proto::ClusterMap* map);
  absl::Status Describe(proto::CoordinatorStatus* status);
  // The map once its epoch is past `after_epoch`, waiting up to `wait`
  // (nullopt: not yet). UNAVAILABLE once stopping, or cut off from the
  // state: a watcher then follows another coordinator.
  absl::StatusOr<std::optional<proto::ClusterMap>> NextMap(uint64_t after_epoch,
                                                           absl::Duration wait);

  // For /metrics (coordinator_metrics.h).
  struct Snapshot {
    proto::ClusterMap map;  // Empty until the state was read.
    bool leading = false;   // It may renew leases now.
    uint64_t commits = 0;   // Changes of the state stored, and refused by the store.
    uint64_t commit_failures = 0;
    // Seen while leading: groups that began to reconfigure; how long
    // reconfigurations took (to serving again), and live copies (from
    // their start until the spare joined, or the copy ended).
    uint64_t reconfigurations = 0;
    MetricHistogram reconfiguration_seconds{kDurationBounds};
    MetricHistogram live_copy_seconds{kDurationBounds};
  };
  static inline const std::vector<double> kDurationBounds = {0.1, 0.25, 0.5, 1,   2.5, 5,
                                                             10,  30,   60,  120, 300, 900};
  Snapshot MetricsSnapshot() const;

  // Marks down the servers whose lease ran out, if this coordinator may
  // order changes (CoordinatorOptions::lease_thread does it every quarter
  // lease).
  void CheckLeases();

 private:
  struct ServerEntry {
    proto::ServerInfo info;
    absl::Time last_heard;  // On options_.clock: leases never see a step of the wall clock.
    // Its region's chunk hashes, sent with its registration after a fence
    // (for the push that corrects it); not part of the map, nor stored: a
    // push ordered by a coordinator that did not get them copies whole.
    std::vector<uint64_t> chunk_hashes;
  };
  // The state as it was before a change, to put back if the store refuses it.
  struct Saved {
    std::map<std::string, ServerEntry> servers;
    ReplicaGroups groups;
    uint64_t epoch;
  };

  void OnLead(const proto::ClusterMap& state) override;
  void OnFollow(const proto::ClusterMap& state) override;
  // Takes `state` as the coordinator's; false (nothing taken) when it is
  // another cluster's (a different number of copies).
  bool LoadLocked(const proto::ClusterMap& state);

  // None before Start, nor once the store turned out to hold another
  // cluster's state.
  Leadership LeadershipLocked() const;
  // UNAVAILABLE, naming the leader, unless this coordinator may renew
  // leases now.
  absl::Status CheckLeading(const Leadership& l) const;
  proto::ClusterMap MapLocked() const;
  std::map<std::string, ServerView> ViewsLocked() const;
  // Tells a replicated group's serving primary to run the heap census, and
  // where its backups are.
  void SetCensusLocked(const std::string& id, uint64_t generation,
                       proto::HeartbeatResponse* resp) const;
  Saved SaveLocked() const { return {servers_, groups_, epoch_}; }
  // Re-evaluates the replica groups, bumps the epoch and stores the state;
  // true when stored (watchers are woken). Otherwise puts `before` back —
  // keeping what was heard of leases and usage since — and returns false.
  bool CommitLocked(Saved before);
  void LeaseLoop();
  void CheckLeasesLocked();

  static CoordinatorOptions WithClock(CoordinatorOptions o) {
    o.clock = OrMonotonic(std::move(o.clock));
    return o;
  }
  absl::Time Now() const { return options_.clock(); }

  const CoordinatorOptions options_;
  mutable std::mutex mu_;
  // Set once, by Start.
  std::string id_;
  std::string address_;
  std::unique_ptr<StateStore> store_;
  std::condition_variable changed_;
  std::map<std::string, ServerEntry> servers_;
  ReplicaGroups groups_;
  uint64_t epoch_ = 0;
  uint64_t term_ = 0;
  // The state was read from the store at least once: until then there is
  // no map to serve.
  bool loaded_ = false;
  // The store holds another cluster's state (status()).
  absl::Status refused_;
  bool stopping_ = false;
  // Notes, after a stored change, the groups that began or ended a
  // reconfiguration or a live copy, for MetricsSnapshot().
  void NoteGroupChangesLocked(const ReplicaGroups& before);
  uint64_t commits_ = 0;
  uint64_t commit_failures_ = 0;
  uint64_t reconfigurations_ = 0;
  MetricHistogram reconfiguration_seconds_{kDurationBounds};
  MetricHistogram live_copy_seconds_{kDurationBounds};
  std::map<std::string, absl::Time> reconfiguring_since_;  // By group id.
  std::map<std::string, absl::Time> copying_since_;
  std::thread lease_thread_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_COORDINATOR_H_
