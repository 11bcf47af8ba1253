// A replica group as the coordinator keeps it: which servers hold the
// copies of one region, under which registrations, and where its
// reconfiguration stands. The map and the state file carry it as a
// proto::ReplicaGroup, whose parallel lists (members and generations,
// serving and serving_generations, copying and copying_generations) must
// stay in step; here a server's id and generation travel together, and
// only replica_group_codec.h deals in those lists.
#ifndef RKV_SERVER_KVCOORD_REPLICA_GROUP_H_
#define RKV_SERVER_KVCOORD_REPLICA_GROUP_H_

#include <cstdint>
#include <string>
#include <vector>

namespace rkv::server {

// A server in one of a group's sets, with the generation (registration)
// under which its copy counts: the same server registered under another
// generation may hold other memory.
struct Member {
  std::string id;
  uint64_t generation = 0;

  friend bool operator==(const Member&, const Member&) = default;
};

enum class GroupState {
  // Every member holds the copy: clients read the primary and write all.
  kServing,
  // The members are being fenced and made to agree (the first pushes its
  // copy to the others): the group's keys are unavailable meanwhile.
  kReconfiguring,
  // No member holds a usable copy: unavailable until one of `serving`
  // comes back with its region.
  kLost,
};

struct ReplicaGroup {
  // The group's name; with one copy per group, its server's id.
  std::string id;
  GroupState state = GroupState::kLost;
  // Grows with every reconfiguration.
  uint64_t config = 0;
  // Of every member: the geometry a new member must share.
  uint64_t region_bytes = 0;
  // A new group that has not served yet: it places no keys.
  bool forming = false;
  // The primary first. kServing: the copies clients use, each under the
  // generation it serves under (a member registered under another one no
  // longer holds this copy). kReconfiguring: those being made to agree,
  // each under the generation it had when the reconfiguration began (it
  // is fenced once registered under a later one). kLost: those of
  // `serving`, whose generations nothing reads (the group starts over
  // from `serving`).
  std::vector<Member> members;
  // kReconfiguring: members being copied in rather than survivors (a push
  // that fails half way leaves them nothing).
  std::vector<std::string> joining;
  // The copies that hold every acknowledged write: those of the last
  // configuration that served (writes are acknowledged only while a group
  // serves), until a push is ordered, then only the pusher's (a push cut
  // short leaves its targets half copies).
  std::vector<Member> serving;
  // kServing: spares being copied in live from the primary, under the
  // generations they had when it began; once copied they join in a
  // reconfiguration.
  std::vector<Member> copying;
  // Of the push or live copy under way: bytes pushed (or found equal) so
  // far, of the total (all targets together).
  uint64_t copied_bytes = 0;
  uint64_t copy_bytes = 0;

  friend bool operator==(const ReplicaGroup&, const ReplicaGroup&) = default;
};

inline std::vector<std::string> Ids(const std::vector<Member>& members) {
  std::vector<std::string> ids;
  ids.reserve(members.size());
  for (const Member& m : members) ids.push_back(m.id);
  return ids;
}

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_REPLICA_GROUP_H_
