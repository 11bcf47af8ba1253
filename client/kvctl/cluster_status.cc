#include "client/kvctl/cluster_status.h"

#include "proto/coordinator_stub.h"

namespace rkv::kvctl {

ClusterStatus ReadClusterStatus(const std::string& coordinator_list, const std::string& token,
                                absl::Duration rpc_timeout) {
  CoordinatorStub coord(coordinator_list, token);
  ClusterStatus out;
  const std::vector<std::string> addresses = coord.addresses();
  for (size_t i = 0; i < addresses.size(); ++i) {
    CoordinatorReading& r = out.coordinators.emplace_back();
    r.address = addresses[i];
    grpc::ClientContext ctx;
    coord.Prepare(&ctx, rpc_timeout);
    if (!coord.stub_at(i).Describe(&ctx, proto::DescribeRequest(), &r.status).ok()) {
      r.status = proto::CoordinatorStatus();
    }
  }
  out.map_read = absl::UnavailableError("no coordinator leads");
  for (size_t i = 0; i < out.coordinators.size() && !out.map_read.ok(); ++i) {
    if (!out.coordinators[i].status.leading()) continue;
    CoordinatorStub leader(out.coordinators[i].address, token);
    out.map_read = leader.GetClusterMap(&out.map, rpc_timeout);
  }
  if (!out.map_read.ok()) out.map_read = coord.GetClusterMap(&out.map, rpc_timeout);
  return out;
}

const char* CoordinatorRole(const proto::CoordinatorStatus& c) {
  if (c.address().empty()) return "unreachable";
  if (c.leading()) return "leader";
  return c.ready() ? "standby" : "starting";
}

const char* ServerStateName(proto::ServerState s) {
  return s == proto::SERVER_STATE_UP ? "up" : "down";
}

const char* GroupStateName(proto::GroupState s) {
  switch (s) {
    case proto::GROUP_STATE_SERVING:
      return "serving";
    case proto::GROUP_STATE_RECONFIGURING:
      return "reconfiguring";
    case proto::GROUP_STATE_LOST:
      return "lost";
    default:
      return "unknown";
  }
}

}  // namespace rkv::kvctl
