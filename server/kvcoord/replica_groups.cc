#include "server/kvcoord/replica_groups.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "server/kvcoord/replica_group_codec.h"

namespace rkv::server {
namespace {

const ServerView* View(const std::map<std::string, ServerView>& servers, const std::string& id) {
  auto it = servers.find(id);
  return it == servers.end() ? nullptr : &it->second;
}

bool Contains(const std::vector<std::string>& v, const std::string& id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

bool Contains(const std::vector<Member>& v, const std::string& id) {
  return std::any_of(v.begin(), v.end(), [&](const Member& m) { return m.id == id; });
}

}  // namespace

absl::Status ReplicaGroups::Load(const proto::ClusterMap& map) {
  std::vector<ReplicaGroup> groups;
  groups.reserve(map.groups_size());
  for (const proto::ReplicaGroup& g : map.groups()) {
    RKV_ASSIGN_OR_RETURN(ReplicaGroup group, FromProto(g));
    groups.push_back(std::move(group));
  }
  groups_ = std::move(groups);
  next_group_ = std::max<uint64_t>(1, map.next_group());
  return absl::OkStatus();
}

void ReplicaGroups::Save(proto::ClusterMap* map) const {
  map->set_replicas(replicas_);
  map->set_next_group(next_group_);
  map->clear_groups();
  for (const ReplicaGroup& g : groups_) *map->add_groups() = ToProto(g);
}

ReplicaGroup* ReplicaGroups::Find(const std::string& group_id) {
  for (ReplicaGroup& g : groups_) {
    if (g.id == group_id) return &g;
  }
  return nullptr;
}

bool ReplicaGroups::Update(const std::map<std::string, ServerView>& servers) {
  if (replicas_ <= 1) return UpdateSingle(servers);
  bool changed = false;
  for (ReplicaGroup& g : groups_) {
    switch (g.state) {
      case GroupState::kServing:
        changed |= UpdateServing(g, servers);
        break;
      case GroupState::kReconfiguring:
        changed |= UpdateReconfig(g, servers);
        break;
      case GroupState::kLost:
        changed |= UpdateLost(g, servers);
        break;
    }
  }
  // A group forming whose members all went away is dropped: it never
  // placed a key.
  const size_t before = groups_.size();
  std::erase_if(groups_, [](const ReplicaGroup& g) { return g.members.empty(); });
  changed |= groups_.size() != before;
  changed |= PlaceSpares(servers);
  return changed;
}

bool ReplicaGroups::UpdateSingle(const std::map<std::string, ServerView>& servers) {
  // One copy: a group per server, named after it, serving while it is up.
  std::vector<ReplicaGroup> next;
  for (const auto& [id, s] : servers) {
    next.push_back({.id = id,
                    .state = s.up ? GroupState::kServing : GroupState::kLost,
                    .config = 1,
                    .region_bytes = s.region_bytes,
                    .members = {{id, s.generation}}});
  }
  const bool changed = next != groups_;
  groups_ = std::move(next);
  return changed;
}

void ReplicaGroups::ClearCopying(ReplicaGroup& g) {
  g.copying.clear();
  g.copied_bytes = 0;
  g.copy_bytes = 0;
}

void ReplicaGroups::StartReconfig(ReplicaGroup& g, std::vector<std::string> members,
                                  std::vector<std::string> joining,
                                  const std::map<std::string, ServerView>& servers) {
  g.state = GroupState::kReconfiguring;
  g.config++;
  g.members.clear();
  for (const std::string& m : members) {
    const ServerView* s = View(servers, m);
    g.members.push_back({m, s == nullptr ? 0 : s->generation});  // Fenced once above this.
  }
  g.joining = std::move(joining);
  ClearCopying(g);
  RKV_LOG(INFO) << "group " << g.id << " reconfigures (config " << g.config << "): members "
                << absl::StrJoin(Ids(g.members), ",")
                << (g.joining.empty()
                        ? ""
                        : absl::StrCat(", copying in ", absl::StrJoin(g.joining, ",")))
                << (g.forming ? " (new group)" : "");
}

bool ReplicaGroups::UpdateServing(ReplicaGroup& g,
                                  const std::map<std::string, ServerView>& servers) {
  std::vector<std::string> survivors;
  bool intact = true;
  for (const Member& m : g.members) {
    const ServerView* s = View(servers, m.id);
    intact &= s != nullptr && s->up && s->generation == m.generation;
    // Back under a new generation with its region (a restart, a fence of
    // its own): its copy counts, but must agree with the others again (a
    // write may have been half done).
    if (s != nullptr && s->Holds(m.generation)) survivors.push_back(m.id);
  }
  if (intact) return DropGoneSpares(g, servers);
  if (survivors.empty()) {
    Lose(g);
    return true;
  }
  StartReconfig(g, std::move(survivors), {}, servers);
  return true;
}

bool ReplicaGroups::DropGoneSpares(ReplicaGroup& g,
                                   const std::map<std::string, ServerView>& servers) {
  // A spare being copied in that went down or registered anew holds
  // nothing of the copy any more: it is no longer copied (and may be
  // taken again as a spare).
  bool gone = false;
  for (const Member& spare : g.copying) {
    const ServerView* s = View(servers, spare.id);
    gone |= s == nullptr || !s->up || s->generation != spare.generation;
  }
  if (!gone) return false;
  RKV_LOG(INFO) << "group " << g.id << ": a spare being copied in ("
                << absl::StrJoin(Ids(g.copying), ",") << ") went away; copy abandoned";
  ClearCopying(g);
  return true;
}

std::vector<std::string> ReplicaGroups::Returned(
    const ReplicaGroup& g, const std::map<std::string, ServerView>& servers) const {
  std::vector<std::string> back;
  for (const Member& m : g.serving) {
    const ServerView* s = View(servers, m.id);
    if (s == nullptr || !s->Holds(m.generation)) continue;
    const bool elsewhere =
        std::any_of(groups_.begin(), groups_.end(), [&](const ReplicaGroup& other) {
          return other.id != g.id && Contains(other.members, m.id);
        });
    if (!elsewhere) back.push_back(m.id);
  }
  return back;
}

void ReplicaGroups::Lose(ReplicaGroup& g) {
  g.state = GroupState::kLost;
  g.members = g.serving;
  g.joining.clear();
  RKV_LOG(WARNING) << "group " << g.id << " has no copy up (it last served on "
                   << absl::StrJoin(Ids(g.serving), ",") << "); unavailable until one of them "
                   << "returns with its region";
}

bool ReplicaGroups::UpdateLost(ReplicaGroup& g, const std::map<std::string, ServerView>& servers) {
  std::vector<std::string> back = Returned(g, servers);
  if (back.empty()) return false;
  StartReconfig(g, std::move(back), {}, servers);
  return true;
}

bool ReplicaGroups::UpdateReconfig(ReplicaGroup& g,
                                   const std::map<std::string, ServerView>& servers) {
  bool dropped = false;
  for (const Member& m : g.members) {
    const ServerView* s = View(servers, m.id);
    // Down, or registered with other memory since the reconfiguration
    // began (blank, or a region file from before).
    dropped |= s == nullptr || !s->up || s->lineage > m.generation;
  }
  if (!dropped) return false;  // The push goes on, or is about to be ordered (BeginPush).
  // Members that still hold a copy the group may serve: those of `serving`
  // (a member copied in holds nothing yet).
  std::vector<std::string> survivors = Returned(g, servers);
  std::erase_if(survivors, [&](const std::string& m) { return !Contains(g.members, m); });
  if (g.forming) {
    // A new group holds no data: it goes on with the members left, or is
    // dropped (by Update) with none.
    std::vector<std::string> kept;
    for (const Member& m : g.members) {
      const ServerView* s = View(servers, m.id);
      if (s != nullptr && s->up && s->lineage <= m.generation) kept.push_back(m.id);
    }
    if (kept.empty()) {
      g.members.clear();
      return true;
    }
    StartReconfig(g, kept, kept, servers);
    return true;
  }
  if (survivors.empty()) survivors = Returned(g, servers);  // Back from before.
  if (survivors.empty()) {
    Lose(g);
    return true;
  }
  StartReconfig(g, std::move(survivors), {}, servers);
  return true;
}

std::vector<std::string> ReplicaGroups::Spares(const std::map<std::string, ServerView>& servers,
                                               uint64_t region_bytes) const {
  // Not a spare: a member, nor, while its group does not serve, a member of
  // the group's last serving configuration — it may hold the only copy of
  // the group's acknowledged writes, which a push would overwrite.
  std::set<std::string> placed;
  for (const ReplicaGroup& g : groups_) {
    for (const Member& m : g.members) placed.insert(m.id);
    for (const Member& m : g.copying) placed.insert(m.id);
    if (g.state != GroupState::kServing) {
      for (const Member& m : g.serving) placed.insert(m.id);
    }
  }
  std::vector<std::string> out;
  for (const auto& [id, s] : servers) {
    auto refused = refused_.find(id);
    if (refused != refused_.end() && refused->second == s.generation) continue;
    if (s.up && !placed.contains(id) && (region_bytes == 0 || s.region_bytes == region_bytes)) {
      out.push_back(id);
    }
  }
  return out;
}

bool ReplicaGroups::PlaceSpares(const std::map<std::string, ServerView>& servers) {
  bool changed = false;
  // Groups short of copies first: the spares they lack are copied in live
  // from the primary while the group serves on, and join once copied.
  for (ReplicaGroup& g : groups_) {
    if (g.state != GroupState::kServing || g.members.size() >= replicas_ || !g.copying.empty()) {
      continue;
    }
    std::vector<std::string> spares = Spares(servers, g.region_bytes);
    if (spares.empty()) continue;
    spares.resize(std::min<size_t>(spares.size(), replicas_ - g.members.size()));
    ClearCopying(g);
    for (const std::string& id : spares) g.copying.push_back({id, View(servers, id)->generation});
    RKV_LOG(INFO) << "group " << g.id << " copies " << absl::StrJoin(spares, ",")
                  << " in while it serves (from " << g.members[0].id << ")";
    changed = true;
  }
  // Then new groups, of R spares with one region size — only while every
  // group serves with all its copies: a spare is first of all a group's
  // next copy, and a group being repaired may need it next. (A new group
  // takes over some keys from the others, and does not copy them: adding
  // servers is a deliberate act, as with one copy.)
  for (const ReplicaGroup& g : groups_) {
    if (g.state != GroupState::kServing || g.members.size() < replicas_) return changed;
  }
  for (;;) {
    std::map<uint64_t, std::vector<std::string>> by_size;
    for (const std::string& id : Spares(servers, 0)) {
      by_size[View(servers, id)->region_bytes].push_back(id);
    }
    auto it = std::find_if(by_size.begin(), by_size.end(),
                           [&](const auto& e) { return e.second.size() >= replicas_; });
    if (it == by_size.end()) break;
    it->second.resize(replicas_);
    ReplicaGroup& g = groups_.emplace_back();
    g.id = absl::StrCat("g", next_group_++);
    g.region_bytes = it->first;
    g.forming = true;
    StartReconfig(g, it->second, it->second, servers);
    changed = true;
  }
  return changed;
}

void ReplicaGroups::Refuse(const proto::PushProgress& p, const std::vector<std::string>& targets,
                           const std::map<std::string, ServerView>& servers) {
  const ServerView* s = View(servers, p.failed_target());
  if (s == nullptr) return;
  // The registration the push was ordered to, not one made since (the
  // target fenced on its own and registered again while the push went
  // to the one before: that is why it failed, and the new one is good).
  uint64_t generation = s->generation;
  for (size_t i = 0; i < targets.size() && i < size_t(p.target_generations_size()); ++i) {
    if (targets[i] == p.failed_target()) generation = p.target_generations(int(i));
  }
  refused_[p.failed_target()] = generation;
}

bool ReplicaGroups::OnLiveProgress(ReplicaGroup& g, const proto::PushProgress& p,
                                   const std::map<std::string, ServerView>& servers) {
  // Of a copy to the spares as they are registered now, or stale (a spare
  // registered anew since is copied again, under another order).
  if (g.copying.empty() ||
      !std::equal(p.target_generations().begin(), p.target_generations().end(), g.copying.begin(),
                  g.copying.end(), [](uint64_t generation, const Member& spare) {
                    return generation == spare.generation;
                  })) {
    return false;
  }
  if (!p.error().empty()) {
    RKV_LOG(WARNING) << "group " << g.id << ": the live copy from " << g.members[0].id << " failed"
                     << (p.failed_target().empty() ? "" : " to " + p.failed_target()) << ": "
                     << p.error();
    // As for a push: a spare the primary cannot reach is no spare until it
    // registers anew. The others are taken again by PlaceSpares.
    Refuse(p, Ids(g.copying), servers);
    ClearCopying(g);
    return true;
  }
  g.copied_bytes = p.copied_bytes();
  g.copy_bytes = p.copy_bytes();
  if (!p.done()) return false;
  // Copied as of no single moment: the spares join in a reconfiguration,
  // fenced, that sends them only the chunks that differ from the primary's.
  std::vector<std::string> members = Ids(g.members);
  std::vector<std::string> joining = Ids(g.copying);
  members.insert(members.end(), joining.begin(), joining.end());
  StartReconfig(g, std::move(members), std::move(joining), servers);
  return true;
}

bool ReplicaGroups::AllFenced(const ReplicaGroup& g,
                              const std::map<std::string, ServerView>& servers) const {
  for (const Member& m : g.members) {
    const ServerView* s = View(servers, m.id);
    if (s == nullptr || s->generation <= m.generation || s->lineage > m.generation) return false;
  }
  return true;
}

bool ReplicaGroups::MustFence(const std::string& id, uint64_t generation) const {
  for (const ReplicaGroup& g : groups_) {
    if (g.state != GroupState::kReconfiguring) continue;
    for (const Member& m : g.members) {
      if (m.id == id) return generation <= m.generation;
    }
  }
  return false;
}

bool ReplicaGroups::Reconfiguring(const std::string& id) const {
  for (const ReplicaGroup& g : groups_) {
    if (g.state == GroupState::kReconfiguring && Contains(g.members, id)) return true;
  }
  return false;
}

const ReplicaGroup* ReplicaGroups::ServingAsPrimary(const std::string& id,
                                                    uint64_t generation) const {
  for (const ReplicaGroup& g : groups_) {
    if (g.state == GroupState::kServing && !g.members.empty() &&
        g.members[0] == Member{id, generation}) {
      return &g;
    }
  }
  return nullptr;
}

int ReplicaGroups::PendingPush(const std::string& id,
                               const std::map<std::string, ServerView>& servers) const {
  for (size_t i = 0; i < groups_.size(); ++i) {
    const ReplicaGroup& g = groups_[i];
    if (g.state == GroupState::kReconfiguring && !g.forming && g.members[0].id == id &&
        AllFenced(g, servers) && !(g.serving.size() == 1 && g.serving[0].id == id)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool ReplicaGroups::PushPending(const std::string& id,
                                const std::map<std::string, ServerView>& servers) const {
  return PendingPush(id, servers) >= 0;
}

bool ReplicaGroups::BeginPush(const std::string& id,
                              const std::map<std::string, ServerView>& servers) {
  const int i = PendingPush(id, servers);
  if (i < 0) return false;
  groups_[i].serving = {{id, View(servers, id)->generation}};
  return true;
}

std::optional<proto::PushOrder> ReplicaGroups::PushFor(
    const std::string& id, const std::map<std::string, ServerView>& servers) const {
  for (const ReplicaGroup& g : groups_) {
    if (g.state == GroupState::kServing && !g.copying.empty() && g.members[0].id == id) {
      proto::PushOrder order;
      order.set_group(g.id);
      order.set_config(g.config);
      order.set_live(true);
      for (const Member& t : g.copying) order.add_targets()->set_id(t.id);
      return order;
    }
    if (g.state != GroupState::kReconfiguring || g.members[0].id != id || !AllFenced(g, servers)) {
      continue;
    }
    // Not before only the pusher's copy counts (BeginPush).
    if (!g.forming && !(g.serving.size() == 1 && g.serving[0].id == id)) continue;
    proto::PushOrder order;
    order.set_group(g.id);
    order.set_config(g.config);
    order.set_wipe(g.forming);
    for (size_t i = 1; i < g.members.size(); ++i) order.add_targets()->set_id(g.members[i].id);
    return order;
  }
  return std::nullopt;
}

bool ReplicaGroups::OnProgress(const std::string& id, const proto::PushProgress& p,
                               const std::map<std::string, ServerView>& servers) {
  ReplicaGroup* g = Find(p.group());
  if (g == nullptr || g->config != p.config() || g->members.empty() || g->members[0].id != id) {
    return false;  // A report of an order that no longer stands.
  }
  if (p.live()) return g->state == GroupState::kServing && OnLiveProgress(*g, p, servers);
  if (g->state != GroupState::kReconfiguring) return false;
  if (!p.error().empty()) {
    RKV_LOG(WARNING) << "group " << g->id << ": the push from " << id << " failed"
                     << (p.failed_target().empty() ? "" : " to " + p.failed_target()) << ": "
                     << p.error() << "; starting over"
                     << (p.failed_target().empty() ? "" : " without it");
    // A target the pusher cannot reach would fail every push: it is left
    // out, and taken again only once it registers anew.
    std::vector<std::string> members, joining, targets;
    for (size_t i = 1; i < g->members.size(); ++i) targets.push_back(g->members[i].id);
    for (const Member& m : g->members) {
      if (m.id == p.failed_target() && m.id != id) {
        Refuse(p, targets, servers);
        continue;
      }
      members.push_back(m.id);
      if (Contains(g->joining, m.id)) joining.push_back(m.id);
    }
    StartReconfig(*g, std::move(members), std::move(joining), servers);
    return true;
  }
  // Progress is shown (kvctl status reads the map) but is no change of the
  // map: it neither bumps the epoch nor is written to the state file.
  g->copied_bytes = p.copied_bytes();
  g->copy_bytes = p.copy_bytes();
  // Done, and every member still registered as it was when fenced: the
  // copies agree.
  if (!p.done() || !AllFenced(*g, servers)) return false;
  g->state = GroupState::kServing;
  g->forming = false;
  g->joining.clear();
  for (Member& m : g->members) m.generation = View(servers, m.id)->generation;
  g->serving = g->members;
  RKV_LOG(INFO) << "group " << g->id << " serves (config " << g->config << ") on "
                << absl::StrJoin(Ids(g->members), ",");
  return true;
}

}  // namespace rkv::server
