// The cluster client's sessions, one per replica group of the map (with
// one copy per key, per server). They live apart from the map because
// they outlive it: when a group's copies change (a server restarted with a
// new rkey, the group reconfigured or left the map), its session is not
// closed but drains — polled until every operation it holds has completed
// (failed, mostly, its connection being gone), so that each callback runs
// exactly once — and only then closes. A session is connected on the
// client's executor, so that no call waits on the network; the
// operations for a group wait in it meanwhile. A session is reached as a
// RegionSession (client/region/region_session.h), not as an rkv::Client. The sessions share one
// fabric, one scratch memory, one slot cache and one completion channel
// (ClientResources).
#ifndef RKV_CLIENT_CLUSTER_GROUP_SESSIONS_H_
#define RKV_CLIENT_CLUSTER_GROUP_SESSIONS_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cluster/executor.h"
#include "client/cluster/op_pool.h"
#include "client/cluster/routing.h"
#include "client/region/region_session.h"
#include "client/session/client_resources.h"
#include "client/session/open_options.h"
#include "rkv/client.h"
#include "rkvpb/coordinator.pb.h"

namespace rkv::client_internal {

// A replica group as the client knows it: the map's word on it and the
// session that reaches its copies.
struct Group {
  proto::ReplicaGroup info;
  std::vector<proto::ServerInfo> members;  // In the group's order, the primary first.
  std::unique_ptr<RegionSession> session;  // Once connected.
  bool connecting = false;
  // Operations for the session while it connects, or parked while the
  // group reconfigures.
  std::deque<OpPtr> waiting;
};

class GroupSessions {
 public:
  // Runs on the client's thread when a connect ends, if `g` is still the
  // group it connected for (same copies, no session yet): `g.session` is
  // set, or `failed` says why not. A connect that lost that race closes
  // its session at once: it holds no operations.
  using Connected = std::function<void(Group& g, const absl::Status& failed)>;

  GroupSessions(const OpenOptions& options, std::shared_ptr<ClientResources> resources,
                Connected connected);

  // Takes the groups of `map`. A group keeps its session while its copies
  // are the same ones (the same configuration, members, generations and
  // rkeys); otherwise its session drains. Operations that waited for a
  // session so retired never started: they go to `unstarted`, to be sent
  // where the new map says.
  void Adopt(const proto::ClusterMap& map, std::deque<OpPtr>& unstarted);

  Group* Route(absl::string_view key) { return client_internal::Route(groups_, key); }
  std::map<std::string, Group>& groups() { return groups_; }

  // Opens `g`'s session on `executor`.
  void Connect(Group& g, Executor& executor);
  // Closes the draining sessions that have nothing left in flight.
  void CloseDrained();
  // Closes every session (each cancels what it holds) and returns the
  // operations that waited for one.
  std::deque<OpPtr> Close();

  // Calls f(RegionSession&) for the sessions of the map's groups, then for those
  // draining.
  template <typename F>
  void ForEachSession(F f) const {
    for (const auto& [id, g] : groups_) {
      if (g.session) f(*g.session);
    }
    for (const auto& s : draining_) f(*s);
  }
  // Operations waiting in the groups.
  size_t waiting() const;
  // What the sessions' operations of `type` have cost, closed ones included.
  OpCosts costs(OpType type) const;

 private:
  // Retires `g`'s session and hands over the operations that waited for it.
  void Retire(Group& g, std::deque<OpPtr>& unstarted);
  void OnConnected(const Group& at, absl::StatusOr<std::unique_ptr<RegionSession>> session);

  const OpenOptions options_;
  const std::shared_ptr<ClientResources> resources_;
  const Connected connected_;
  std::map<std::string, Group> groups_;
  std::vector<std::unique_ptr<RegionSession>> draining_;
  OpCosts closed_costs_[kOpTypes];
  // Sessions opened: with a seed (the simulation), each session's is the
  // client's plus this count.
  uint64_t sessions_opened_ = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_GROUP_SESSIONS_H_
