#include "server/kvcoord/replica_groups.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace rkv::server {
namespace {

const ServerView* View(const std::map<std::string, ServerView>& servers, const std::string& id) {
  auto it = servers.find(id);
  return it == servers.end() ? nullptr : &it->second;
}

bool Contains(const std::vector<std::string>& v, const std::string& id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

}  // namespace

void ReplicaGroups::Load(const proto::ClusterMap& map) {
  groups_.assign(map.groups().begin(), map.groups().end());
  next_group_ = std::max<uint64_t>(1, map.next_group());
}

void ReplicaGroups::Save(proto::ClusterMap* map) const {
  map->set_replicas(replicas_);
  map->set_next_group(next_group_);
  map->clear_groups();
  for (const proto::ReplicaGroup& g : groups_) *map->add_groups() = g;
}

proto::ReplicaGroup* ReplicaGroups::Find(const std::string& group_id) {
  for (proto::ReplicaGroup& g : groups_) {
    if (g.id() == group_id) return &g;
  }
  return nullptr;
}

bool ReplicaGroups::Update(const std::map<std::string, ServerView>& servers) {
  if (replicas_ <= 1) return UpdateSingle(servers);
  bool changed = false;
  for (proto::ReplicaGroup& g : groups_) {
    switch (g.state()) {
      case proto::GROUP_STATE_SERVING:
        changed |= UpdateServing(g, servers);
        break;
      case proto::GROUP_STATE_RECONFIGURING:
        changed |= UpdateReconfig(g, servers);
        break;
      default:
        changed |= UpdateLost(g, servers);
        break;
    }
  }
  // A group forming whose members all went away is dropped: it never
  // placed a key.
  const size_t before = groups_.size();
  std::erase_if(groups_, [](const proto::ReplicaGroup& g) { return g.members().empty(); });
  changed |= groups_.size() != before;
  changed |= PlaceSpares(servers);
  return changed;
}

bool ReplicaGroups::UpdateSingle(const std::map<std::string, ServerView>& servers) {
  // One copy: a group per server, named after it, serving while it is up.
  std::vector<proto::ReplicaGroup> next;
  for (const auto& [id, s] : servers) {
    proto::ReplicaGroup& g = next.emplace_back();
    g.set_id(id);
    g.add_members(id);
    g.add_generations(s.generation);
    g.set_state(s.up ? proto::GROUP_STATE_SERVING : proto::GROUP_STATE_LOST);
    g.set_config(1);
    g.set_region_bytes(s.region_bytes);
  }
  bool changed = next.size() != groups_.size();
  for (size_t i = 0; !changed && i < next.size(); ++i) {
    changed = next[i].SerializeAsString() != groups_[i].SerializeAsString();
  }
  groups_ = std::move(next);
  return changed;
}

void ReplicaGroups::ClearCopying(proto::ReplicaGroup& g) {
  g.clear_copying();
  g.clear_copying_generations();
  g.set_copied_bytes(0);
  g.set_copy_bytes(0);
}

void ReplicaGroups::StartReconfig(proto::ReplicaGroup& g, std::vector<std::string> members,
                                  std::vector<std::string> joining,
                                  const std::map<std::string, ServerView>& servers) {
  g.set_state(proto::GROUP_STATE_RECONFIGURING);
  g.set_config(g.config() + 1);
  g.clear_members();
  g.clear_generations();
  for (const std::string& m : members) {
    g.add_members(m);
    const ServerView* s = View(servers, m);
    g.add_generations(s == nullptr ? 0 : s->generation);  // Fenced once above this.
  }
  g.clear_joining();
  for (const std::string& j : joining) g.add_joining(j);
  ClearCopying(g);
  RKV_LOG(INFO) << "group " << g.id() << " reconfigures (config " << g.config() << "): members "
                << absl::StrJoin(g.members(), ",")
                << (g.joining().empty()
                        ? ""
                        : absl::StrCat(", copying in ", absl::StrJoin(g.joining(), ",")))
                << (g.forming() ? " (new group)" : "");
}

bool ReplicaGroups::UpdateServing(proto::ReplicaGroup& g,
                                  const std::map<std::string, ServerView>& servers) {
  std::vector<std::string> survivors;
  bool intact = true;
  for (int i = 0; i < g.members_size(); ++i) {
    const ServerView* s = View(servers, g.members(i));
    intact &= s != nullptr && s->up && s->generation == g.generations(i);
    // Back under a new generation with its region (a restart, a fence of
    // its own): its copy counts, but must agree with the others again (a
    // write may have been half done).
    if (s != nullptr && s->Holds(g.generations(i))) survivors.push_back(g.members(i));
  }
  if (intact) return DropGoneSpares(g, servers);
  if (survivors.empty()) {
    Lose(g);
    return true;
  }
  StartReconfig(g, std::move(survivors), {}, servers);
  return true;
}

bool ReplicaGroups::DropGoneSpares(proto::ReplicaGroup& g,
                                   const std::map<std::string, ServerView>& servers) {
  // A spare being copied in that went down or registered anew holds
  // nothing of the copy any more: it is no longer copied (and may be
  // taken again as a spare).
  bool gone = false;
  for (int i = 0; i < g.copying_size(); ++i) {
    const ServerView* s = View(servers, g.copying(i));
    gone |= s == nullptr || !s->up || s->generation != g.copying_generations(i);
  }
  if (!gone) return false;
  RKV_LOG(INFO) << "group " << g.id() << ": a spare being copied in ("
                << absl::StrJoin(g.copying(), ",") << ") went away; copy abandoned";
  ClearCopying(g);
  return true;
}

std::vector<std::string> ReplicaGroups::Returned(
    const proto::ReplicaGroup& g, const std::map<std::string, ServerView>& servers) const {
  std::vector<std::string> back;
  for (int i = 0; i < g.serving_size(); ++i) {
    const ServerView* s = View(servers, g.serving(i));
    if (s == nullptr || !s->Holds(g.serving_generations(i))) continue;
    const bool elsewhere = std::any_of(groups_.begin(), groups_.end(), [&](const auto& other) {
      return other.id() != g.id() &&
             Contains({other.members().begin(), other.members().end()}, g.serving(i));
    });
    if (!elsewhere) back.push_back(g.serving(i));
  }
  return back;
}

void ReplicaGroups::Lose(proto::ReplicaGroup& g) {
  g.set_state(proto::GROUP_STATE_LOST);
  g.clear_members();
  for (const std::string& m : g.serving()) g.add_members(m);
  g.clear_joining();
  RKV_LOG(WARNING) << "group " << g.id() << " has no copy up (it last served on "
                   << absl::StrJoin(g.serving(), ",") << "); unavailable until one of them "
                   << "returns with its region";
}

bool ReplicaGroups::UpdateLost(proto::ReplicaGroup& g,
                               const std::map<std::string, ServerView>& servers) {
  std::vector<std::string> back = Returned(g, servers);
  if (back.empty()) return false;
  StartReconfig(g, std::move(back), {}, servers);
  return true;
}

bool ReplicaGroups::UpdateReconfig(proto::ReplicaGroup& g,
                                   const std::map<std::string, ServerView>& servers) {
  bool dropped = false;
  for (int i = 0; i < g.members_size(); ++i) {
    const ServerView* s = View(servers, g.members(i));
    // Down, or registered with other memory since the reconfiguration
    // began (blank, or a region file from before).
    dropped |= s == nullptr || !s->up || s->lineage > g.generations(i);
  }
  if (!dropped) return false;  // The push goes on, or is about to be ordered (BeginPush).
  // Members that still hold a copy the group may serve: those of `serving`
  // (a member copied in holds nothing yet).
  std::vector<std::string> survivors = Returned(g, servers);
  std::erase_if(survivors, [&](const std::string& m) {
    return !Contains({g.members().begin(), g.members().end()}, m);
  });
  if (g.forming()) {
    // A new group holds no data: it goes on with the members left, or is
    // dropped (by Update) with none.
    std::vector<std::string> kept;
    for (int i = 0; i < g.members_size(); ++i) {
      const ServerView* s = View(servers, g.members(i));
      if (s != nullptr && s->up && s->lineage <= g.generations(i)) kept.push_back(g.members(i));
    }
    if (kept.empty()) {
      g.clear_members();
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
  for (const proto::ReplicaGroup& g : groups_) {
    placed.insert(g.members().begin(), g.members().end());
    placed.insert(g.copying().begin(), g.copying().end());
    if (g.state() != proto::GROUP_STATE_SERVING)
      placed.insert(g.serving().begin(), g.serving().end());
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
  for (proto::ReplicaGroup& g : groups_) {
    if (g.state() != proto::GROUP_STATE_SERVING || g.members_size() >= int(replicas_) ||
        g.copying_size() > 0) {
      continue;
    }
    std::vector<std::string> spares = Spares(servers, g.region_bytes());
    if (spares.empty()) continue;
    spares.resize(std::min<size_t>(spares.size(), replicas_ - g.members_size()));
    ClearCopying(g);
    for (const std::string& id : spares) {
      g.add_copying(id);
      g.add_copying_generations(View(servers, id)->generation);
    }
    RKV_LOG(INFO) << "group " << g.id() << " copies " << absl::StrJoin(spares, ",")
                  << " in while it serves (from " << g.members(0) << ")";
    changed = true;
  }
  // Then new groups, of R spares with one region size — only while every
  // group serves with all its copies: a spare is first of all a group's
  // next copy, and a group being repaired may need it next. (A new group
  // takes over some keys from the others, and does not copy them: adding
  // servers is a deliberate act, as with one copy.)
  for (const proto::ReplicaGroup& g : groups_) {
    if (g.state() != proto::GROUP_STATE_SERVING || g.members_size() < int(replicas_)) {
      return changed;
    }
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
    proto::ReplicaGroup& g = groups_.emplace_back();
    g.set_id(absl::StrCat("g", next_group_++));
    g.set_region_bytes(it->first);
    g.set_forming(true);
    StartReconfig(g, it->second, it->second, servers);
    changed = true;
  }
  return changed;
}

bool ReplicaGroups::OnLiveProgress(proto::ReplicaGroup& g, const proto::PushProgress& p,
                                   const std::map<std::string, ServerView>& servers) {
  // Of a copy to the spares as they are registered now, or stale (a spare
  // registered anew since is copied again, under another order).
  if (g.copying_size() == 0 ||
      !std::equal(p.target_generations().begin(), p.target_generations().end(),
                  g.copying_generations().begin(), g.copying_generations().end())) {
    return false;
  }
  if (!p.error().empty()) {
    RKV_LOG(WARNING) << "group " << g.id() << ": the live copy from " << g.members(0) << " failed"
                     << (p.failed_target().empty() ? "" : " to " + p.failed_target()) << ": "
                     << p.error();
    // As for a push: a spare the primary cannot reach is no spare until it
    // registers anew. The others are taken again by PlaceSpares.
    if (const ServerView* s = View(servers, p.failed_target()); s != nullptr) {
      refused_[p.failed_target()] = s->generation;
    }
    ClearCopying(g);
    return true;
  }
  g.set_copied_bytes(p.copied_bytes());
  g.set_copy_bytes(p.copy_bytes());
  if (!p.done()) return false;
  // Copied as of no single moment: the spares join in a reconfiguration,
  // fenced, that sends them only the chunks that differ from the primary's.
  std::vector<std::string> members(g.members().begin(), g.members().end());
  std::vector<std::string> joining(g.copying().begin(), g.copying().end());
  members.insert(members.end(), joining.begin(), joining.end());
  StartReconfig(g, std::move(members), std::move(joining), servers);
  return true;
}

bool ReplicaGroups::AllFenced(const proto::ReplicaGroup& g,
                              const std::map<std::string, ServerView>& servers) const {
  for (int i = 0; i < g.members_size(); ++i) {
    const ServerView* s = View(servers, g.members(i));
    if (s == nullptr || s->generation <= g.generations(i) || s->lineage > g.generations(i)) {
      return false;
    }
  }
  return true;
}

bool ReplicaGroups::MustFence(const std::string& id, uint64_t generation) const {
  for (const proto::ReplicaGroup& g : groups_) {
    if (g.state() != proto::GROUP_STATE_RECONFIGURING) continue;
    for (int i = 0; i < g.members_size(); ++i) {
      if (g.members(i) == id) return generation <= g.generations(i);
    }
  }
  return false;
}

bool ReplicaGroups::Reconfiguring(const std::string& id) const {
  for (const proto::ReplicaGroup& g : groups_) {
    if (g.state() == proto::GROUP_STATE_RECONFIGURING &&
        std::find(g.members().begin(), g.members().end(), id) != g.members().end()) {
      return true;
    }
  }
  return false;
}

int ReplicaGroups::PendingPush(const std::string& id,
                               const std::map<std::string, ServerView>& servers) const {
  for (size_t i = 0; i < groups_.size(); ++i) {
    const proto::ReplicaGroup& g = groups_[i];
    if (g.state() == proto::GROUP_STATE_RECONFIGURING && !g.forming() && g.members(0) == id &&
        AllFenced(g, servers) && !(g.serving_size() == 1 && g.serving(0) == id)) {
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
  proto::ReplicaGroup& g = groups_[i];
  g.clear_serving();
  g.clear_serving_generations();
  g.add_serving(id);
  g.add_serving_generations(View(servers, id)->generation);
  return true;
}

std::optional<proto::PushOrder> ReplicaGroups::PushFor(
    const std::string& id, const std::map<std::string, ServerView>& servers) const {
  for (const proto::ReplicaGroup& g : groups_) {
    if (g.state() == proto::GROUP_STATE_SERVING && g.copying_size() > 0 && g.members(0) == id) {
      proto::PushOrder order;
      order.set_group(g.id());
      order.set_config(g.config());
      order.set_live(true);
      for (const std::string& t : g.copying()) order.add_targets()->set_id(t);
      return order;
    }
    if (g.state() != proto::GROUP_STATE_RECONFIGURING || g.members(0) != id ||
        !AllFenced(g, servers)) {
      continue;
    }
    // Not before only the pusher's copy counts (BeginPush).
    if (!g.forming() && !(g.serving_size() == 1 && g.serving(0) == id)) continue;
    proto::PushOrder order;
    order.set_group(g.id());
    order.set_config(g.config());
    order.set_wipe(g.forming());
    for (int i = 1; i < g.members_size(); ++i) order.add_targets()->set_id(g.members(i));
    return order;
  }
  return std::nullopt;
}

bool ReplicaGroups::OnProgress(const std::string& id, const proto::PushProgress& p,
                               const std::map<std::string, ServerView>& servers) {
  proto::ReplicaGroup* g = Find(p.group());
  if (g == nullptr || g->config() != p.config() || g->members_size() == 0 || g->members(0) != id) {
    return false;  // A report of an order that no longer stands.
  }
  if (p.live()) return g->state() == proto::GROUP_STATE_SERVING && OnLiveProgress(*g, p, servers);
  if (g->state() != proto::GROUP_STATE_RECONFIGURING) return false;
  if (!p.error().empty()) {
    RKV_LOG(WARNING) << "group " << g->id() << ": the push from " << id << " failed"
                     << (p.failed_target().empty() ? "" : " to " + p.failed_target()) << ": "
                     << p.error() << "; starting over"
                     << (p.failed_target().empty() ? "" : " without it");
    // A target the pusher cannot reach would fail every push: it is left
    // out, and taken again only once it registers anew.
    std::vector<std::string> members, joining;
    for (const std::string& m : g->members()) {
      if (m == p.failed_target() && m != id) {
        if (const ServerView* s = View(servers, m)) refused_[m] = s->generation;
        continue;
      }
      members.push_back(m);
      if (Contains({g->joining().begin(), g->joining().end()}, m)) joining.push_back(m);
    }
    StartReconfig(*g, std::move(members), std::move(joining), servers);
    return true;
  }
  // Progress is shown (kvctl status reads the map) but is no change of the
  // map: it neither bumps the epoch nor is written to the state file.
  g->set_copied_bytes(p.copied_bytes());
  g->set_copy_bytes(p.copy_bytes());
  // Done, and every member still registered as it was when fenced: the
  // copies agree.
  if (!p.done() || !AllFenced(*g, servers)) return false;
  g->set_state(proto::GROUP_STATE_SERVING);
  g->set_forming(false);
  g->clear_joining();
  g->clear_serving();
  g->clear_serving_generations();
  for (const std::string& m : g->members()) {
    g->add_serving(m);
    g->add_serving_generations(View(servers, m)->generation);
  }
  g->clear_generations();
  for (const std::string& m : g->members()) g->add_generations(View(servers, m)->generation);
  RKV_LOG(INFO) << "group " << g->id() << " serves (config " << g->config() << ") on "
                << absl::StrJoin(g->members(), ",");
  return true;
}

}  // namespace rkv::server
