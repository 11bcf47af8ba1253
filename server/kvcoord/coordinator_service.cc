#include "server/kvcoord/coordinator_service.h"

#include <optional>
#include <utility>

#include "common/logging.h"

namespace rkv::server {
namespace {

// The core's answer as gRPC's; a refusal naming the leader names it in
// the trailing metadata too, where CoordinatorStub looks for it.
grpc::Status ToGrpc(grpc::ServerContext* ctx, const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  if (auto leader = s.GetPayload(kLeaderPayload)) {
    ctx->AddTrailingMetadata(kLeaderMetadata, std::string(*leader));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace

CoordinatorService::CoordinatorService(Coordinator& core, std::string token)
    : core_(core), token_(std::move(token)) {}

grpc::Status CoordinatorService::Authenticate(grpc::ServerContext* ctx, const char* method) const {
  if (token_.empty()) return grpc::Status::OK;
  auto it = ctx->client_metadata().find(kTokenMetadata);
  if (it != ctx->client_metadata().end() &&
      std::string(it->second.data(), it->second.size()) == token_) {
    return grpc::Status::OK;
  }
  RKV_LOG(WARNING) << "rejected " << method << " from " << ctx->peer()
                   << ": missing or wrong cluster token";
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong cluster token (metadata rkv-token)");
}

grpc::Status CoordinatorService::Register(grpc::ServerContext* ctx,
                                          const proto::RegisterRequest* req,
                                          proto::RegisterResponse* resp) {
  if (auto s = Authenticate(ctx, "Register"); !s.ok()) return s;
  return ToGrpc(ctx, core_.Register(*req, resp));
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* ctx,
                                           const proto::HeartbeatRequest* req,
                                           proto::HeartbeatResponse* resp) {
  if (auto s = Authenticate(ctx, "Heartbeat"); !s.ok()) return s;
  return ToGrpc(ctx, core_.Heartbeat(*req, resp));
}

grpc::Status CoordinatorService::Deregister(grpc::ServerContext* ctx,
                                            const proto::DeregisterRequest* req,
                                            proto::DeregisterResponse*) {
  if (auto s = Authenticate(ctx, "Deregister"); !s.ok()) return s;
  return ToGrpc(ctx, core_.Deregister(*req));
}

grpc::Status CoordinatorService::GetClusterMap(grpc::ServerContext* ctx,
                                               const proto::GetClusterMapRequest*,
                                               proto::ClusterMap* resp) {
  if (auto s = Authenticate(ctx, "GetClusterMap"); !s.ok()) return s;
  return ToGrpc(ctx, core_.GetClusterMap(resp));
}

grpc::Status CoordinatorService::WatchClusterMap(grpc::ServerContext* ctx,
                                                 const proto::WatchClusterMapRequest* req,
                                                 grpc::ServerWriter<proto::ClusterMap>* writer) {
  if (auto s = Authenticate(ctx, "WatchClusterMap"); !s.ok()) return s;
  uint64_t sent = req->after_epoch();
  for (;;) {
    absl::StatusOr<std::optional<proto::ClusterMap>> map =
        core_.NextMap(sent, absl::Milliseconds(200));
    if (!map.ok()) return ToGrpc(ctx, map.status());
    if (!map->has_value()) {
      if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
      continue;
    }
    if (!writer->Write(**map)) return grpc::Status::CANCELLED;
    sent = (*map)->epoch();
  }
}

grpc::Status CoordinatorService::Describe(grpc::ServerContext* ctx, const proto::DescribeRequest*,
                                          proto::CoordinatorStatus* resp) {
  if (auto s = Authenticate(ctx, "Describe"); !s.ok()) return s;
  return ToGrpc(ctx, core_.Describe(resp));
}

}  // namespace rkv::server
