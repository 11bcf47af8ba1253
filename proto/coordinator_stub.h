// A client of kvcoord: a gRPC channel plus the cluster token and deadlines
// that every call carries. Used by kvserver, the cluster client and kvctl.
#ifndef RKV_PROTO_COORDINATOR_STUB_H_
#define RKV_PROTO_COORDINATOR_STUB_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "rkvpb/coordinator.grpc.pb.h"

namespace rkv {

// Where `cluster.sh` runs its coordinator; what the tools default to.
inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7400";

class CoordinatorStub {
 public:
  CoordinatorStub(const std::string& address, std::string token);

  // Sets the token metadata and a deadline on `ctx`.
  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const;
  proto::Coordinator::Stub& stub() { return *stub_; }
  const std::string& address() const { return address_; }

  absl::Status GetClusterMap(proto::ClusterMap* map, absl::Duration timeout = absl::Seconds(5));

 private:
  const std::string address_;
  const std::string token_;
  std::unique_ptr<proto::Coordinator::Stub> stub_;
};

// grpc::Status -> absl::Status, prefixed with what was being done.
absl::Status FromGrpc(const grpc::Status& s, const std::string& what);

}  // namespace rkv

#endif  // RKV_PROTO_COORDINATOR_STUB_H_
