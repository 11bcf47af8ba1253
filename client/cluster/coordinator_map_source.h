// The coordinators' map over gRPC: GetClusterMap for a fetch, and a thread
// of its own that follows the WatchClusterMap stream for the client's
// life, moving to the next coordinator when one goes away (any of them,
// leading or standing by, serves the map). It keeps the newest map the
// stream brought for the client's thread to take; what the client does
// with it is none of its business.
#ifndef RKV_CLIENT_CLUSTER_COORDINATOR_MAP_SOURCE_H_
#define RKV_CLIENT_CLUSTER_COORDINATOR_MAP_SOURCE_H_

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "client/cluster/map_source.h"
#include "proto/coordinator_stub.h"

namespace rkv::client_internal {

class CoordinatorMapSource final : public MapSource {
 public:
  // `coordinator`: one address or several, comma-separated.
  CoordinatorMapSource(const std::string& coordinator, const std::string& token);
  // Ends the watch stream and joins its thread.
  ~CoordinatorMapSource() override;
  CoordinatorMapSource(const CoordinatorMapSource&) = delete;
  CoordinatorMapSource& operator=(const CoordinatorMapSource&) = delete;

  absl::StatusOr<proto::ClusterMap> Fetch(absl::Duration timeout) override;
  void Watch() override;
  std::unique_ptr<proto::ClusterMap> TakeNewest() override;

 private:
  void WatchLoop();

  const std::string token_;
  // Fetches and the watch thread share it: it is thread-safe.
  CoordinatorStub coord_;

  // Written by the watch thread, taken by the client's thread.
  std::mutex mu_;
  std::unique_ptr<proto::ClusterMap> newer_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  // The watch thread's: streams that ended since one last brought a map.
  size_t broken_ = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_COORDINATOR_MAP_SOURCE_H_
