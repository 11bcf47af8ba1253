// Routing: every key goes to the group that scores highest among those
// that place keys, a group's departure moves only its own keys, a group
// that is away keeps its keys, and the placement of keys does not change
// from one version to the next (the keys already stored depend on it).
#include "client/cluster/routing.h"

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rkv::client_internal {
namespace {

struct TestGroup {
  proto::ReplicaGroup info;
};

std::map<std::string, TestGroup> Groups(std::initializer_list<const char*> ids) {
  std::map<std::string, TestGroup> groups;
  for (const char* id : ids) {
    groups[id].info.set_id(id);
    groups[id].info.set_state(proto::GROUP_STATE_SERVING);
  }
  return groups;
}

std::string Key(int i) { return absl::StrCat("key", i); }

TEST(RoutingTest, EachKeyGoesToTheGroupThatScoresHighest) {
  std::map<std::string, TestGroup> groups = Groups({"g1", "g2", "g3"});
  std::map<std::string, int> keys_of;
  for (int i = 0; i < 300; ++i) {
    const TestGroup* g = Route(groups, Key(i));
    ASSERT_NE(g, nullptr);
    for (const auto& [id, other] : groups) {
      EXPECT_GE(RendezvousScore(g->info.id(), Key(i)), RendezvousScore(id, Key(i)));
    }
    keys_of[g->info.id()]++;
  }
  for (const auto& [id, g] : groups) EXPECT_GT(keys_of[id], 50) << id;
}

TEST(RoutingTest, PlacesKeysAsEarlierVersionsDid) {
  std::map<std::string, TestGroup> groups = Groups({"g1", "g2", "g3"});
  std::string placed;
  for (int i = 0; i < 12; ++i) placed += Route(groups, Key(i))->info.id().back();
  EXPECT_EQ(placed, "221121231232");
}

TEST(RoutingTest, AGroupThatLeavesTakesOnlyItsOwnKeysAlong) {
  std::map<std::string, TestGroup> groups = Groups({"g1", "g2", "g3"});
  std::map<std::string, std::string> before;
  for (int i = 0; i < 300; ++i) before[Key(i)] = Route(groups, Key(i))->info.id();
  groups.erase("g2");
  for (const auto& [key, id] : before) {
    const std::string now = Route(groups, key)->info.id();
    if (id == "g2") {
      EXPECT_NE(now, "g2");
    } else {
      EXPECT_EQ(now, id) << key;
    }
  }
}

TEST(RoutingTest, AGroupAwayKeepsItsKeysAndOneFormingTakesNone) {
  std::map<std::string, TestGroup> groups = Groups({"g1", "g2", "g3"});
  std::map<std::string, std::string> before;
  for (int i = 0; i < 300; ++i) before[Key(i)] = Route(groups, Key(i))->info.id();
  groups["g1"].info.set_state(proto::GROUP_STATE_LOST);
  groups["g2"].info.set_state(proto::GROUP_STATE_RECONFIGURING);
  for (const auto& [key, id] : before) EXPECT_EQ(Route(groups, key)->info.id(), id) << key;

  groups["g3"].info.set_forming(true);
  for (const auto& [key, id] : before) EXPECT_NE(Route(groups, key)->info.id(), "g3") << key;
  groups["g1"].info.set_forming(true);
  groups["g2"].info.set_forming(true);
  EXPECT_EQ(Route(groups, "k"), nullptr);
  std::map<std::string, TestGroup> none;
  EXPECT_EQ(Route(none, "k"), nullptr);
}

TEST(RoutingTest, WithoutGroupsInTheMapEachServerIsOne) {
  proto::ClusterMap map;
  proto::ServerInfo* up = map.add_servers();
  up->set_id("s1");
  up->set_state(proto::SERVER_STATE_UP);
  proto::ServerInfo* down = map.add_servers();
  down->set_id("s2");
  down->set_state(proto::SERVER_STATE_DOWN);
  std::vector<proto::ReplicaGroup> groups = ReplicaGroupsOf(map);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].id(), "s1");
  ASSERT_EQ(groups[0].members_size(), 1);
  EXPECT_EQ(groups[0].members(0), "s1");
  EXPECT_EQ(groups[0].state(), proto::GROUP_STATE_SERVING);
  EXPECT_EQ(groups[1].id(), "s2");
  ASSERT_EQ(groups[1].members_size(), 1);
  EXPECT_EQ(groups[1].members(0), "s2");
  EXPECT_EQ(groups[1].state(), proto::GROUP_STATE_LOST);

  // A map with groups is taken as it is: servers of no group place nothing.
  proto::ReplicaGroup* g = map.add_groups();
  g->set_id("g1");
  g->add_members("s2");
  g->set_state(proto::GROUP_STATE_RECONFIGURING);
  groups = ReplicaGroupsOf(map);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].id(), "g1");
  EXPECT_EQ(groups[0].state(), proto::GROUP_STATE_RECONFIGURING);
}

}  // namespace
}  // namespace rkv::client_internal
