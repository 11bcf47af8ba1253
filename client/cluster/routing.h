// Which replica group holds a key: a pure function of the coordinator's
// map, so that every client that has the same map agrees, with no word
// from the coordinator per key. Rendezvous hashing over the group ids:
// taking a group out of the map moves only that group's keys.
#ifndef RKV_CLIENT_CLUSTER_ROUTING_H_
#define RKV_CLIENT_CLUSTER_ROUTING_H_

#include <concepts>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/hash.h"
#include "rkvpb/coordinator.pb.h"

namespace rkv::client_internal {

// The map's replica groups. A coordinator that predates them sends none:
// each server is then a group of its own, named after it, which serves
// while the server is up.
std::vector<proto::ReplicaGroup> ReplicaGroupsOf(const proto::ClusterMap& map);

// How strongly `key` is drawn to the group named `group_id`.
inline uint64_t RendezvousScore(absl::string_view group_id, absl::string_view key) {
  return XXH64(key, XXH64(group_id));
}

// The group that holds `key`: of `groups` (by id), the one with the highest
// score among all that place keys — serving or not, so that a key never
// moves while its group is away; a group still forming places none. Null
// when no group places keys.
template <typename Group>
requires std::same_as<decltype(Group::info), proto::ReplicaGroup> Group* Route(
    std::map<std::string, Group>& groups, absl::string_view key) {
  Group* best = nullptr;
  uint64_t best_score = 0;
  for (auto& [id, g] : groups) {
    if (g.info.forming()) continue;
    const uint64_t score = RendezvousScore(id, key);
    if (best == nullptr || score > best_score) {
      best = &g;
      best_score = score;
    }
  }
  return best;
}

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_ROUTING_H_
