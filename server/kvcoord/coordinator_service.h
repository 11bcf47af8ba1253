// The gRPC shell of kvcoord's Coordinator (coordinator.h): it checks the
// cluster token, hands each call to the core, turns the core's answer into
// gRPC's (a refusal naming the leader carries it as trailing metadata),
// and streams the map to watchers. It decides nothing else.
#ifndef RKV_SERVER_KVCOORD_COORDINATOR_SERVICE_H_
#define RKV_SERVER_KVCOORD_COORDINATOR_SERVICE_H_

#include <string>

#include "rkvpb/coordinator.grpc.pb.h"
#include "server/kvcoord/coordinator.h"

namespace rkv::server {

// Metadata key that carries the cluster token on every call.
inline constexpr char kTokenMetadata[] = "rkv-token";
// Trailing metadata key with which a standby names the leader.
inline constexpr char kLeaderMetadata[] = "rkv-leader";

class CoordinatorService final : public proto::Coordinator::Service {
 public:
  // `token`: what every call must carry (empty: none). `core` must outlive
  // the service.
  CoordinatorService(Coordinator& core, std::string token);

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
  grpc::Status Describe(grpc::ServerContext* ctx, const proto::DescribeRequest* req,
                        proto::CoordinatorStatus* resp) override;

 private:
  grpc::Status Authenticate(grpc::ServerContext* ctx, const char* method) const;

  Coordinator& core_;
  const std::string token_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_COORDINATOR_SERVICE_H_
