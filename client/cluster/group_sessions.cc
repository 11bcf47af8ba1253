#include "client/cluster/group_sessions.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/region/region_client.h"
#include "common/fabric/types.h"

namespace rkv::client_internal {
namespace {

void Add(OpCosts& a, const OpCosts& b) {
  a.ops += b.ops;
  a.round_trips += b.round_trips;
  a.requests += b.requests;
  a.bytes += b.bytes;
  a.retries += b.retries;
}

// The same copies, reached the same way: a session may go on.
bool SameCopies(const Group& a, const Group& b) {
  if (a.info.config() != b.info.config() || a.members.size() != b.members.size()) return false;
  for (size_t i = 0; i < a.members.size(); ++i) {
    const proto::RegionDescriptor& x = a.members[i].region();
    const proto::RegionDescriptor& y = b.members[i].region();
    if (a.members[i].id() != b.members[i].id() || x.generation() != y.generation() ||
        x.rkey() != y.rkey()) {
      return false;
    }
  }
  return true;
}

}  // namespace

GroupSessions::GroupSessions(const OpenOptions& options, std::shared_ptr<ClientResources> resources,
                             Connected connected)
    : options_(options), resources_(std::move(resources)), connected_(std::move(connected)) {}

void GroupSessions::Adopt(const proto::ClusterMap& map, std::deque<OpPtr>& unstarted) {
  std::map<std::string, proto::ServerInfo> servers;
  for (const proto::ServerInfo& info : map.servers()) servers[info.id()] = info;
  std::map<std::string, Group> next;
  for (proto::ReplicaGroup& info : ReplicaGroupsOf(map)) {
    Group& g = next[info.id()];
    g.info = std::move(info);
    for (const std::string& m : g.info.members()) {
      auto it = servers.find(m);
      if (it != servers.end()) g.members.push_back(it->second);
    }
    auto old = groups_.find(g.info.id());
    if (old == groups_.end()) continue;
    if (SameCopies(old->second, g)) {
      g.session = std::move(old->second.session);
      g.connecting = old->second.connecting;
      g.waiting = std::move(old->second.waiting);
    } else {
      Retire(old->second, unstarted);
    }
    groups_.erase(old);
  }
  for (auto& [id, g] : groups_) Retire(g, unstarted);
  groups_ = std::move(next);
}

void GroupSessions::Retire(Group& g, std::deque<OpPtr>& unstarted) {
  if (g.session) draining_.push_back(std::move(g.session));
  for (OpPtr& op : g.waiting) unstarted.push_back(std::move(op));
  g.waiting.clear();
}

void GroupSessions::Connect(Group& g, Executor& executor) {
  g.connecting = true;
  std::vector<fabric::RemoteRegion> copies;
  for (const proto::ServerInfo& m : g.members) {
    const proto::RegionDescriptor& r = m.region();
    copies.push_back(
        {{r.endpoint().address(), options_.cluster_token}, r.base_address(), r.length(), r.rkey()});
  }
  // A seeded session draws its session ids from its seed: sessions opened
  // with the client's one seed would claim the same id, and a server that
  // fenced it would refuse every later session of this client.
  OpenOptions options = options_;
  if (options.seed != 0) options.seed += ++sessions_opened_;
  auto result = std::make_shared<absl::StatusOr<std::unique_ptr<RegionSession>>>();
  executor.Run(
      [result, copies = std::move(copies), options = std::move(options), resources = resources_] {
        absl::StatusOr<std::unique_ptr<RegionClient>> session =
            OpenReplicatedSession(copies, options, {}, resources);
        if (session.ok()) {
          *result = std::unique_ptr<RegionSession>(std::move(session).value());
        } else {
          *result = session.status();
        }
      },
      [this, result, info = g.info, members = g.members] {
        Group at;
        at.info = info;
        at.members = members;
        OnConnected(at, std::move(*result));
      });
}

void GroupSessions::OnConnected(const Group& at,
                                absl::StatusOr<std::unique_ptr<RegionSession>> session) {
  auto it = groups_.find(at.info.id());
  // The map moved on while connecting, or the group changed and another
  // connect won: those that waited for this session went elsewhere.
  if (it == groups_.end() || !SameCopies(it->second, at) || it->second.session) return;
  Group& g = it->second;
  g.connecting = false;
  if (!session.ok()) {
    connected_(
        g, absl::UnavailableError(absl::StrCat(at.info.members_size() == 1 ? "server " : "group ",
                                               at.info.id(), ": ", session.status().message())));
    return;
  }
  g.session = std::move(session).value();
  connected_(g, absl::OkStatus());
}

void GroupSessions::CloseDrained() {
  std::erase_if(draining_, [this](const std::unique_ptr<RegionSession>& s) {
    if (s->in_flight() > 0) return false;
    for (int t = 0; t < kOpTypes; ++t) Add(closed_costs_[t], s->costs(static_cast<OpType>(t)));
    return true;
  });
}

std::deque<OpPtr> GroupSessions::Close() {
  std::deque<OpPtr> unstarted;
  for (auto& [id, g] : groups_) {
    for (OpPtr& op : g.waiting) unstarted.push_back(std::move(op));
  }
  groups_.clear();
  draining_.clear();
  return unstarted;
}

size_t GroupSessions::waiting() const {
  size_t n = 0;
  for (const auto& [id, g] : groups_) n += g.waiting.size();
  return n;
}

OpCosts GroupSessions::costs(OpType type) const {
  OpCosts c = closed_costs_[static_cast<int>(type)];
  ForEachSession([&](const RegionSession& s) { Add(c, s.costs(type)); });
  return c;
}

}  // namespace rkv::client_internal
