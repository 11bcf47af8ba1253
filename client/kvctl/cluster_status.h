// What kvctl reads of a cluster: each coordinator of the list as it
// describes itself, and the cluster map from the one that leads. `kvctl
// status` prints one reading; `kvctl wait` takes readings until a condition
// holds (wait_condition.h), so both see the cluster the same way.
#ifndef RKV_CLIENT_KVCTL_CLUSTER_STATUS_H_
#define RKV_CLIENT_KVCTL_CLUSTER_STATUS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rkvpb/coordinator.pb.h"

namespace rkv::kvctl {

// One coordinator of the list: the address it was listed (or learned)
// under, and its answer to Describe (`status.address()` empty: it did not
// answer).
struct CoordinatorReading {
  std::string address;
  proto::CoordinatorStatus status;
};

struct ClusterStatus {
  std::vector<CoordinatorReading> coordinators;
  // The leader's map (it shows usage as heard with the last heartbeats),
  // or else any coordinator's; `map` is meaningful only when map_read is OK.
  absl::Status map_read;
  proto::ClusterMap map;
};

// One reading through the comma-separated `coordinator_list`, each call
// within `rpc_timeout`. Fresh channels each time: a coordinator that came
// back is seen at once, not after gRPC's reconnect backoff.
ClusterStatus ReadClusterStatus(const std::string& coordinator_list, const std::string& token,
                                absl::Duration rpc_timeout);

// unreachable, leader, standby (ready to take over), or starting (it has
// not read the cluster's state yet, or is out of touch with it).
const char* CoordinatorRole(const proto::CoordinatorStatus& c);

// up or down.
const char* ServerStateName(proto::ServerState s);

// serving, reconfiguring, lost or unknown.
const char* GroupStateName(proto::GroupState s);

// Copies of every key as the map states them (0 in older maps means 1).
inline uint32_t MapReplicas(const proto::ClusterMap& map) {
  return map.replicas() == 0 ? 1 : map.replicas();
}

}  // namespace rkv::kvctl

#endif  // RKV_CLIENT_KVCTL_CLUSTER_STATUS_H_
