#include "client/cluster/routing.h"

namespace rkv::client_internal {

std::vector<proto::ReplicaGroup> ReplicaGroupsOf(const proto::ClusterMap& map) {
  std::vector<proto::ReplicaGroup> groups(map.groups().begin(), map.groups().end());
  if (!groups.empty()) return groups;
  for (const proto::ServerInfo& info : map.servers()) {
    proto::ReplicaGroup& g = groups.emplace_back();
    g.set_id(info.id());
    g.add_members(info.id());
    g.set_state(info.state() == proto::SERVER_STATE_UP ? proto::GROUP_STATE_SERVING
                                                       : proto::GROUP_STATE_LOST);
  }
  return groups;
}

}  // namespace rkv::client_internal
