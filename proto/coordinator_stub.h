// A client of kvcoord: gRPC channels to every coordinator of a cluster,
// plus the cluster token and deadlines that every call carries. Used by
// kvserver, the cluster client and kvctl.
//
// Several coordinators may run: one leads, the others stand by. Call()
// tries them in turn, starting with the one that answered last (or the
// leader a standby named), so that callers follow the leader with no help.
// A leader named that is not in the list (the list is one name that
// resolves to every coordinator, say) joins it.
#ifndef RKV_PROTO_COORDINATOR_STUB_H_
#define RKV_PROTO_COORDINATOR_STUB_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "rkvpb/coordinator.grpc.pb.h"

namespace rkv {

// Where `cluster.sh` runs its coordinators; what the tools default to.
inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7400,127.0.0.1:7401";

// "host:port,host:port,...": each non-empty, no duplicates.
absl::StatusOr<std::vector<std::string>> ParseCoordinatorList(const std::string& list);

class CoordinatorStub {
 public:
  // `addresses`: one coordinator's host:port, or several, comma-separated
  // (ParseCoordinatorList; an invalid list is used as one address, which
  // the first call then fails to reach).
  CoordinatorStub(const std::string& addresses, std::string token);

  // Sets the token metadata and a deadline on `ctx`.
  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const;

  using Rpc = std::function<grpc::Status(proto::Coordinator::Stub& stub, grpc::ClientContext& ctx)>;
  // Calls `rpc` on the coordinators in turn until one gives an answer other
  // than UNAVAILABLE or DEADLINE_EXCEEDED (what a standby answers a call
  // only the leader takes, and what a lost coordinator gives), each try
  // within `per_try`, all within `timeout`; then returns that answer, or
  // the last failure. Thread-safe.
  grpc::Status Call(absl::Duration timeout, absl::Duration per_try, const Rpc& rpc);

  // The coordinator that answered last, for streams; Next() moves on to
  // the next (a stream broke).
  proto::Coordinator::Stub& stub();
  void Next();
  // The coordinator stub() names now.
  std::string address() const;
  // Those given, and the leaders learned since.
  std::vector<std::string> addresses() const;
  // A stub for one coordinator of the list (kvctl asks each).
  proto::Coordinator::Stub& stub_at(size_t i);

  absl::Status GetClusterMap(proto::ClusterMap* map, absl::Duration timeout = absl::Seconds(5));

 private:
  // The index of `address`, added if new.
  size_t IndexLocked(const std::string& address);

  const std::string token_;
  mutable std::mutex mu_;
  std::vector<std::string> addresses_;
  // Never shrinks, and a stub never moves: references stay valid.
  std::vector<std::unique_ptr<proto::Coordinator::Stub>> stubs_;
  size_t current_ = 0;
};

// grpc::Status -> absl::Status, prefixed with what was being done.
absl::Status FromGrpc(const grpc::Status& s, const std::string& what);

}  // namespace rkv

#endif  // RKV_PROTO_COORDINATOR_STUB_H_
