// kvcoord's state and RPCs: who is in the cluster, where their regions are,
// and whether their leases hold. With a state file the membership and the
// map epoch survive a restart: the restarted coordinator serves the map it
// had (servers that were up get a fresh lease to heartbeat in) with a newer
// epoch, so clients follow it, and a server that is down meanwhile stays in
// the map, down, instead of vanishing and having its keys routed elsewhere.
// Without one, a restarted coordinator learns the cluster again from the
// servers' next heartbeats (which come back NOT_FOUND and make each server
// register anew), and its epochs start again from 1.
#ifndef RKV_SERVER_KVCOORD_COORDINATOR_SERVICE_H_
#define RKV_SERVER_KVCOORD_COORDINATOR_SERVICE_H_

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rkvpb/coordinator.grpc.pb.h"
#include "server/kvcoord/replica_groups.h"

namespace rkv::server {

// Metadata key that carries the cluster token on every call.
inline constexpr char kTokenMetadata[] = "rkv-token";

class CoordinatorService final : public proto::Coordinator::Service {
 public:
  CoordinatorService(std::string token, absl::Duration lease, std::string state_file = "",
                     uint32_t replicas = 1);
  ~CoordinatorService() override;

  // Loads the state file, if there is one; call before serving. A missing
  // file is a first start; one that does not parse is an error.
  absl::Status Recover();

  // Ends open watches; call before shutting the gRPC server down.
  void Stop();

  grpc::Status Register(grpc::ServerContext* ctx, const proto::RegisterRequest* req,
                        proto::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const proto::HeartbeatRequest* req,
                         proto::HeartbeatResponse* resp) override;
  grpc::Status Deregister(grpc::ServerContext* ctx, const proto::DeregisterRequest* req,
                          proto::DeregisterResponse* resp) override;
  grpc::Status GetClusterMap(grpc::ServerContext* ctx, const proto::GetClusterMapRequest* req,
                             proto::ClusterMap* resp) override;
  grpc::Status WatchClusterMap(grpc::ServerContext* ctx, const proto::WatchClusterMapRequest* req,
                               grpc::ServerWriter<proto::ClusterMap>* writer) override;

 private:
  struct Member {
    proto::ServerInfo info;
    absl::Time last_heard;  // MonotonicNow(): leases never see a step of the wall clock.
    // Its region's chunk hashes, sent with its registration after a fence
    // (for the push that corrects it); not part of the map.
    std::vector<uint64_t> chunk_hashes;
  };

  grpc::Status Authenticate(grpc::ServerContext* ctx, const char* method) const;
  proto::ClusterMap MapLocked() const;
  std::map<std::string, ServerView> ViewsLocked() const;
  // Re-evaluates the replica groups, bumps the epoch, wakes watchers, and
  // writes the state file.
  void ChangedLocked();
  // Writes the state file (if any) and records in `saved_` whether it is
  // as the map is now.
  void SaveLocked();
  void LeaseLoop();

  const std::string token_;
  const absl::Duration lease_;
  const std::string state_file_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Member> members_;
  ReplicaGroups groups_;
  uint64_t epoch_ = 0;
  // Whether the state file holds the map as it is; retried with every
  // lease tick while it does not. No push begins unsaved (Heartbeat).
  bool saved_ = true;
  bool stopping_ = false;
  std::thread lease_thread_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_COORDINATOR_SERVICE_H_
