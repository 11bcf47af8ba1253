// Where a cluster client gets the coordinator's map: a shell with no
// decision in it. It fetches the map when asked and keeps the newest one
// the coordinator pushed; which map the client takes (never an older one),
// which fetch a retry waits for and what a map changes are the client's
// (map_watcher.h, group_sessions.h). By default the source is the
// coordinators' gRPC service (coordinator_map_source.h); the deterministic
// simulation feeds maps by hand (OpenOptions::map_source).
#ifndef RKV_CLIENT_CLUSTER_MAP_SOURCE_H_
#define RKV_CLIENT_CLUSTER_MAP_SOURCE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rkvpb/coordinator.pb.h"

namespace rkv::client_internal {

class MapSource {
 public:
  virtual ~MapSource() = default;

  // The map as a coordinator has it now, waiting up to `timeout`. Called
  // on the client's thread when it opens, and on its executor for the
  // fetches retries ask for: thread-safe.
  virtual absl::StatusOr<proto::ClusterMap> Fetch(absl::Duration timeout) = 0;
  // Starts following the map's changes (once, after the first Fetch).
  virtual void Watch() = 0;
  // The newest map pushed since the last call, or null; on the client's
  // thread, for every operation it routes: cheap when there is none.
  virtual std::unique_ptr<proto::ClusterMap> TakeNewest() = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_MAP_SOURCE_H_
