// The coordinator's replica groups: which servers hold the copies of which
// region, and the reconfigurations that keep R copies when servers are lost
// or join. Pure bookkeeping, driven by the coordinator under its lock; the
// servers carry the orders out (fence, push) and report back.
//
// A group's life: SERVING while every member holds the copy it had when the
// group last agreed (same generation). A member lost (down, or back without
// its region) or restarted starts a reconfiguration of the members left:
// each is fenced (registers anew under a new rkey, so no request of a
// client of the old configuration lands any more), then the first settles
// its copy and pushes it to the others (the chunks each lacks), and the
// group serves again. A group short of copies takes spare servers (up, in
// no group, same region size): its primary copies its region to them while
// the group serves on (a live copy), then they join in a reconfiguration
// that sends them only what changed meanwhile. R spares with no group to
// join form a new group. With one copy per group (R = 1) groups are the servers themselves
// and none of this runs.
#ifndef RKV_SERVER_KVCOORD_REPLICA_GROUPS_H_
#define RKV_SERVER_KVCOORD_REPLICA_GROUPS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "rkvpb/coordinator.pb.h"
#include "server/kvcoord/replica_group.h"

namespace rkv::server {

// What the groups need to know of a server.
struct ServerView {
  bool up = false;
  uint64_t generation = 0;
  uint64_t region_bytes = 0;
  // The first generation of the run of registrations of the same memory
  // that ends with this one (fences, restarts on the region file): the
  // server holds what it held under any generation from `lineage` to
  // `generation`. A blank registration starts a run of its own.
  uint64_t lineage = 0;

  // Whether the server, up, still holds what it held under `g`.
  bool Holds(uint64_t g) const { return up && lineage <= g && g <= generation; }
};

class ReplicaGroups {
 public:
  explicit ReplicaGroups(uint32_t replicas) : replicas_(replicas) {}

  uint32_t replicas() const { return replicas_; }
  // Restores the groups of a saved map. A group that was reconfiguring
  // goes on with it (fences already made still count; a push ordered
  // again under the same configuration is the one under way). An error,
  // and nothing restored, when a group in it is malformed.
  absl::Status Load(const proto::ClusterMap& map);
  // Writes the groups (and what Load needs) into `map`.
  void Save(proto::ClusterMap* map) const;

  // Re-evaluates every group against the servers, starting, advancing or
  // abandoning reconfigurations; true when anything changed.
  bool Update(const std::map<std::string, ServerView>& servers);

  // Orders for server `id`, registered under `generation`: whether it must
  // fence itself, and the push it must carry out (targets by id; the caller
  // fills in their regions).
  bool MustFence(const std::string& id, uint64_t generation) const;
  // Whether `id` is a member of a group that is reconfiguring.
  bool Reconfiguring(const std::string& id) const;
  // The group that serves with `id`, registered under `generation`, as its
  // primary; null if none.
  const ReplicaGroup* ServingAsPrimary(const std::string& id, uint64_t generation) const;
  // Called before PushFor: once every member of a reconfiguring group is
  // fenced, only the copy of its pusher `id` counts from the moment it is
  // handed the push (a target reached part of the way holds slots and
  // blocks of two copies that need not agree). Until then a member lost —
  // the pusher included — leaves the group on the others' copies. True when
  // this changed the groups: the change must be kept (the state file)
  // before the order goes out.
  bool BeginPush(const std::string& id, const std::map<std::string, ServerView>& servers);
  // Whether BeginPush would change anything.
  bool PushPending(const std::string& id, const std::map<std::string, ServerView>& servers) const;
  std::optional<proto::PushOrder> PushFor(const std::string& id,
                                          const std::map<std::string, ServerView>& servers) const;
  // A push's progress, reported by `id`; true when anything changed.
  bool OnProgress(const std::string& id, const proto::PushProgress& progress,
                  const std::map<std::string, ServerView>& servers);

  const std::vector<ReplicaGroup>& groups() const { return groups_; }

 private:
  void StartReconfig(ReplicaGroup& g, std::vector<std::string> members,
                     std::vector<std::string> joining,
                     const std::map<std::string, ServerView>& servers);
  bool UpdateServing(ReplicaGroup& g, const std::map<std::string, ServerView>& servers);
  // No spare is copied in any more, and no progress shown.
  static void ClearCopying(ReplicaGroup& g);
  // Stops copying spares that went down or registered anew.
  bool DropGoneSpares(ReplicaGroup& g, const std::map<std::string, ServerView>& servers);
  bool OnLiveProgress(ReplicaGroup& g, const proto::PushProgress& p,
                      const std::map<std::string, ServerView>& servers);
  // Takes no group's spare `p.failed_target()` (one of the order's
  // `targets`, in order) under the registration the push went to.
  void Refuse(const proto::PushProgress& p, const std::vector<std::string>& targets,
              const std::map<std::string, ServerView>& servers);
  bool UpdateReconfig(ReplicaGroup& g, const std::map<std::string, ServerView>& servers);
  bool UpdateLost(ReplicaGroup& g, const std::map<std::string, ServerView>& servers);
  bool UpdateSingle(const std::map<std::string, ServerView>& servers);
  // Servers of `g.serving` that are up and hold that copy still (and are
  // in no other group), in its order.
  std::vector<std::string> Returned(const ReplicaGroup& g,
                                    const std::map<std::string, ServerView>& servers) const;
  // No copy is up: the group waits for one of its last serving members.
  static void Lose(ReplicaGroup& g);
  // Servers up and in no group (nor holding a copy a group not serving may
  // need), by id; of `region_bytes` unless 0.
  std::vector<std::string> Spares(const std::map<std::string, ServerView>& servers,
                                  uint64_t region_bytes) const;
  // Adds spares to groups short of copies, and forms new groups of them.
  bool PlaceSpares(const std::map<std::string, ServerView>& servers);
  // The group whose push `id` is about to be handed, by index; -1: none.
  int PendingPush(const std::string& id, const std::map<std::string, ServerView>& servers) const;
  bool AllFenced(const ReplicaGroup& g, const std::map<std::string, ServerView>& servers) const;
  ReplicaGroup* Find(const std::string& group_id);

  uint32_t replicas_;  // Fixed; not const only so that a state can be copied back.
  std::vector<ReplicaGroup> groups_;
  // Servers a push could not reach, with the generation the push went to:
  // no group takes them as spares until they register anew.
  std::map<std::string, uint64_t> refused_;
  uint64_t next_group_ = 1;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_REPLICA_GROUPS_H_
