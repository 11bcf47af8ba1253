#include "coordinator_stub.h"

#include "absl/strings/str_cat.h"

namespace rkv {

CoordinatorStub::CoordinatorStub(const std::string& address, std::string token)
    : address_(address), token_(std::move(token)) {
  // After a coordinator restart, reconnect within a fraction of a lease:
  // gRPC's default backoff grows to minutes, and a server of a replicated
  // cluster that fenced itself meanwhile waits for it to register again.
  // (Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: that is also the shortest time
  // a connection attempt is given, 20 s by default.)
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  stub_ = proto::Coordinator::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

void CoordinatorStub::Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const {
  if (!token_.empty()) ctx->AddMetadata("rkv-token", token_);
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

absl::Status CoordinatorStub::GetClusterMap(proto::ClusterMap* map, absl::Duration timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  return FromGrpc(stub_->GetClusterMap(&ctx, proto::GetClusterMapRequest(), map),
                  absl::StrCat("coordinator ", address_));
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

}  // namespace rkv
