// The coordinator's replica groups, driven the way the coordinator drives
// them: the servers' views change (up, generation, region size, lineage),
// Update runs after every change, a member told to fence registers anew
// under a later generation with its region kept, and the first member
// pushes once every member is fenced and reports back. Each test is a
// cluster event and what the groups must do about it so that no
// acknowledged write is lost and no client reaches a copy that is not its
// group's.
#include "server/kvcoord/replica_groups.h"

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rkvpb/coordinator.pb.h"
#include "server/kvcoord/replica_group.h"
#include "server/kvcoord/replica_group_codec.h"

namespace rkv::server {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr uint64_t kRegionBytes = uint64_t{64} << 20;

std::vector<std::string> Targets(const proto::PushOrder& order) {
  std::vector<std::string> ids;
  for (const proto::ServerInfo& t : order.targets()) ids.push_back(t.id());
  return ids;
}

proto::PushProgress Done(const proto::PushOrder& order) {
  proto::PushProgress p;
  p.set_group(order.group());
  p.set_config(order.config());
  p.set_copied_bytes(kRegionBytes);
  p.set_copy_bytes(kRegionBytes);
  p.set_done(true);
  p.set_live(order.live());
  for (const proto::ServerInfo& t : order.targets())
    p.add_target_generations(t.region().generation());
  return p;
}

proto::PushProgress Failed(const proto::PushOrder& order) {
  proto::PushProgress p;
  p.set_group(order.group());
  p.set_config(order.config());
  p.set_error("connection reset by peer");
  p.set_live(order.live());
  for (const proto::ServerInfo& t : order.targets())
    p.add_target_generations(t.region().generation());
  return p;
}

// The coordinator's side of a cluster: its view of the servers, and the
// groups it keeps of them.
class Cluster {
 public:
  explicit Cluster(uint32_t replicas) : groups_(replicas) {}

  // The coordinator restarted: the same servers, the groups from its
  // state file.
  Cluster Restarted() const {
    proto::ClusterMap map;
    groups_.Save(&map);
    Cluster c(groups_.replicas());
    EXPECT_TRUE(c.groups_.Load(map).ok());
    c.servers_ = servers_;
    return c;
  }

  ReplicaGroups& groups() { return groups_; }

  // Servers registering for the first time (blank), together: one Update.
  bool Join(std::initializer_list<std::string> ids, uint64_t region_bytes = kRegionBytes) {
    for (const std::string& id : ids) {
      servers_[id] =
          ServerView{.up = true, .generation = 1, .region_bytes = region_bytes, .lineage = 1};
    }
    return Update();
  }
  // Missed its lease, or left.
  bool Down(const std::string& id) {
    servers_.at(id).up = false;
    return Update();
  }
  // Registers anew under a later generation, its region kept (a reopened
  // region file) or blank.
  bool Restart(const std::string& id, bool recovered) {
    ServerView& s = servers_.at(id);
    s.up = true;
    s.generation++;
    // With its region the run of registrations of the same memory goes
    // on; a blank one starts a run of its own.
    if (!recovered) s.lineage = s.generation;
    return Update();
  }
  // What a server told to fence does: registers anew under a new rkey, its
  // region's contents kept.
  bool Fence(const std::string& id) { return Restart(id, /*recovered=*/true); }

  bool Update() { return groups_.Update(servers_); }

  // The orders in a heartbeat of `id` under its current generation.
  bool MustFence(const std::string& id) const {
    return groups_.MustFence(id, servers_.at(id).generation);
  }
  bool Reconfiguring(const std::string& id) const { return groups_.Reconfiguring(id); }
  // As the coordinator sends it: the targets as registered now.
  std::optional<proto::PushOrder> PushFor(const std::string& id) {
    groups_.BeginPush(id, servers_);
    std::optional<proto::PushOrder> order = groups_.PushFor(id, servers_);
    if (order) {
      for (proto::ServerInfo& t : *order->mutable_targets()) {
        t.mutable_region()->set_generation(servers_.at(t.id()).generation);
      }
    }
    return order;
  }
  // A push report in a heartbeat of `id`. The coordinator runs Update
  // after a report that changed something; the tests do so themselves, to
  // look at the group in between.
  bool Report(const std::string& id, const proto::PushProgress& p) {
    return groups_.OnProgress(id, p, servers_);
  }

  // A copy of group `id` (empty, and a failure, when there is none).
  ReplicaGroup Group(const std::string& id) const {
    for (const ReplicaGroup& g : groups_.groups()) {
      if (g.id == id) return g;
    }
    ADD_FAILURE() << "no group " << id;
    return {};
  }
  std::vector<std::string> GroupIds() const {
    std::vector<std::string> ids;
    for (const ReplicaGroup& g : groups_.groups()) ids.push_back(g.id);
    return ids;
  }
  std::string Serialized() const {
    proto::ClusterMap map;
    groups_.Save(&map);
    return map.SerializeAsString();
  }

  // Runs the reconfiguration of group `id` through as the servers would:
  // every member fences, the first pushes, reports it done; the group must
  // then serve. Ends with the coordinator's Update after the report (which
  // may start the next reconfiguration, e.g. copying a spare in).
  AssertionResult CompleteReconfiguration(const std::string& id) {
    const ReplicaGroup g = Group(id);
    if (g.state != GroupState::kReconfiguring) {
      return AssertionFailure() << "group " << id
                                << " is not reconfiguring: " << ToProto(g).ShortDebugString();
    }
    for (const std::string& m : Ids(g.members)) {
      if (!MustFence(m)) return AssertionFailure() << m << " was not told to fence";
      if (PushFor(g.members[0].id)) {
        return AssertionFailure() << "a push was ordered before " << m << " fenced";
      }
      Fence(m);
    }
    if (Group(id).config != g.config) {
      return AssertionFailure() << "fencing changed the configuration of " << id;
    }
    std::optional<proto::PushOrder> order = PushFor(g.members[0].id);
    if (!order) return AssertionFailure() << "no push order for " << g.members[0].id;
    if (order->group() != id || order->config() != g.config) {
      return AssertionFailure() << "push order for another group or configuration: "
                                << order->ShortDebugString();
    }
    if (!Report(g.members[0].id, Done(*order))) {
      return AssertionFailure() << "the done report changed nothing";
    }
    const ReplicaGroup after = Group(id);
    if (after.state != GroupState::kServing) {
      return AssertionFailure() << "group " << id << " does not serve after its push: "
                                << ToProto(after).ShortDebugString();
    }
    Update();
    return AssertionSuccess();
  }

  // Runs the live copy of spares into serving group `id` through: its
  // primary is ordered to copy to them (no fence), reports it done, and
  // the group then reconfigures with them joining. Returns the spares.
  AssertionResult CompleteLiveCopy(const std::string& id,
                                   std::initializer_list<std::string> spares) {
    const ReplicaGroup g = Group(id);
    const std::vector<std::string> expected(spares);
    if (g.state != GroupState::kServing || Ids(g.copying) != expected) {
      return AssertionFailure() << "group " << id << " is not copying in "
                                << ::testing::PrintToString(expected) << ": "
                                << ToProto(g).ShortDebugString();
    }
    for (const std::string& m : Ids(g.members)) {
      if (MustFence(m)) return AssertionFailure() << m << " was told to fence during a live copy";
    }
    std::optional<proto::PushOrder> order = PushFor(g.members[0].id);
    if (!order || !order->live() || Targets(*order) != expected || order->wipe()) {
      return AssertionFailure() << "no live copy ordered: "
                                << (order ? order->ShortDebugString() : "none");
    }
    if (!Report(g.members[0].id, Done(*order))) return AssertionFailure() << "done changed nothing";
    const ReplicaGroup after = Group(id);
    if (after.state != GroupState::kReconfiguring || after.joining != expected) {
      return AssertionFailure() << "the spares do not join after their copy: "
                                << ToProto(after).ShortDebugString();
    }
    return AssertionSuccess();
  }

  // No server may be a member of two groups: it holds one region, which
  // can be one group's copy only.
  AssertionResult EachServerInOneGroupAtMost() const {
    std::set<std::string> seen;
    for (const ReplicaGroup& g : groups_.groups()) {
      for (const std::string& m : Ids(g.members)) {
        if (!seen.insert(m).second) {
          return AssertionFailure()
                 << m << " is a member of two groups; group " << ToProto(g).ShortDebugString();
        }
      }
    }
    return AssertionSuccess();
  }

 private:
  ReplicaGroups groups_;
  std::map<std::string, ServerView> servers_;
};

TEST(ReplicaGroupsTest, OneCopyIsAGroupPerServerThatNeverReconfigures) {
  Cluster c(1);
  EXPECT_TRUE(c.Join({"a", "b"}));
  ASSERT_THAT(c.GroupIds(), ElementsAre("a", "b"));
  EXPECT_THAT(Ids(c.Group("a").members), ElementsAre("a"));
  EXPECT_EQ(c.Group("a").state, GroupState::kServing);
  EXPECT_EQ(c.Group("b").state, GroupState::kServing);
  EXPECT_FALSE(c.Update());  // Nothing changed.

  // Its keys are unavailable while it is down, and placed on it again
  // when it is back, blank or not: there is no other copy to take over.
  EXPECT_TRUE(c.Down("b"));
  EXPECT_EQ(c.Group("b").state, GroupState::kLost);
  EXPECT_EQ(c.Group("a").state, GroupState::kServing);
  EXPECT_THAT(Ids(c.Group("b").members), ElementsAre("b"));
  c.Restart("b", /*recovered=*/false);
  EXPECT_EQ(c.Group("b").state, GroupState::kServing);
  c.Restart("a", /*recovered=*/true);
  EXPECT_EQ(c.Group("a").state, GroupState::kServing);

  for (const char* id : {"a", "b"}) {
    EXPECT_FALSE(c.MustFence(id)) << id;
    EXPECT_FALSE(c.Reconfiguring(id)) << id;
    EXPECT_FALSE(c.PushFor(id).has_value()) << id;
  }
}

TEST(ReplicaGroupsTest, TwoCopiesFormOneGroupThatServesAfterFenceAndWipingPush) {
  Cluster c(2);
  EXPECT_TRUE(c.Join({"a", "b", "c"}));
  ASSERT_THAT(c.GroupIds(), ElementsAre("g1"));
  ReplicaGroup g = c.Group("g1");
  // A new group places no keys until its copies agree.
  EXPECT_TRUE(g.forming);
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b"));
  EXPECT_THAT(g.joining, ElementsAre("a", "b"));
  EXPECT_EQ(g.region_bytes, kRegionBytes);
  const uint64_t config = g.config;

  EXPECT_TRUE(c.MustFence("a"));
  EXPECT_TRUE(c.MustFence("b"));
  EXPECT_TRUE(c.Reconfiguring("a"));
  EXPECT_FALSE(c.MustFence("c"));  // A spare has nothing to do.
  EXPECT_FALSE(c.Reconfiguring("c"));

  // No push until every member is fenced: a target a client of the old
  // registration can still write to could lose the push's bytes.
  EXPECT_FALSE(c.PushFor("a").has_value());
  c.Fence("a");
  EXPECT_FALSE(c.MustFence("a"));  // Fenced once is enough.
  EXPECT_FALSE(c.PushFor("a").has_value());
  c.Fence("b");
  EXPECT_FALSE(c.PushFor("b").has_value());  // Only the first member pushes.
  std::optional<proto::PushOrder> order = c.PushFor("a");
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(order->group(), "g1");
  EXPECT_EQ(order->config(), config);
  // What the spares held before is not this group's.
  EXPECT_TRUE(order->wipe());
  EXPECT_THAT(Targets(*order), ElementsAre("b"));

  // Progress part way does not serve; it is shown, but changes nothing
  // the map's watchers or the state file need.
  proto::PushProgress partway = Done(*order);
  partway.set_done(false);
  partway.set_copied_bytes(kRegionBytes / 4);
  EXPECT_FALSE(c.Report("a", partway));
  EXPECT_EQ(c.Group("g1").state, GroupState::kReconfiguring);
  EXPECT_EQ(c.Group("g1").copied_bytes, kRegionBytes / 4);

  EXPECT_TRUE(c.Report("a", Done(*order)));
  g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kServing);
  EXPECT_FALSE(g.forming);
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b"));
  EXPECT_THAT(Ids(g.serving), ElementsAre("a", "b"));
  EXPECT_THAT(g.joining, IsEmpty());
  EXPECT_EQ(g.config, config);
  for (const char* id : {"a", "b", "c"}) {
    EXPECT_FALSE(c.MustFence(id)) << id;
    EXPECT_FALSE(c.Reconfiguring(id)) << id;
    EXPECT_FALSE(c.PushFor(id).has_value()) << id;
  }

  // One spare is not a group: c stays out.
  EXPECT_FALSE(c.Update());
  EXPECT_THAT(c.GroupIds(), ElementsAre("g1"));
}

TEST(ReplicaGroupsTest, FourSparesFormTwoGroups) {
  Cluster c(2);
  c.Join({"a", "b", "c", "d"});
  ASSERT_THAT(c.GroupIds(), ElementsAre("g1", "g2"));
  EXPECT_THAT(Ids(c.Group("g1").members), ElementsAre("a", "b"));
  EXPECT_THAT(Ids(c.Group("g2").members), ElementsAre("c", "d"));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ASSERT_TRUE(c.CompleteReconfiguration("g2"));
  EXPECT_TRUE(c.EachServerInOneGroupAtMost());
}

TEST(ReplicaGroupsTest, LostPrimaryHandsTheGroupToTheSurvivorThenTakesTheSpare) {
  Cluster c(2);
  c.Join({"a", "b", "c"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  const uint64_t config = c.Group("g1").config;

  EXPECT_TRUE(c.Down("a"));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("b"));
  EXPECT_GT(g.config, config);
  EXPECT_THAT(g.joining, IsEmpty());
  // Until the survivor serves, the last serving copies are still a and b.
  EXPECT_THAT(Ids(g.serving), ElementsAre("a", "b"));
  // The survivor settles its copy first; the spare waits.
  EXPECT_TRUE(c.MustFence("b"));
  EXPECT_FALSE(c.Reconfiguring("c"));
  EXPECT_FALSE(c.PushFor("b").has_value());
  c.Fence("b");
  std::optional<proto::PushOrder> order = c.PushFor("b");
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(order->config(), g.config);
  EXPECT_FALSE(order->wipe());  // Its copy is the group's.
  EXPECT_THAT(Targets(*order), IsEmpty());
  EXPECT_TRUE(c.Report("b", Done(*order)));
  g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kServing);
  EXPECT_THAT(Ids(g.members), ElementsAre("b"));
  EXPECT_THAT(Ids(g.serving), ElementsAre("b"));

  // Short of a copy: the spare is copied in from b, live (b serves on),
  // then joins.
  EXPECT_TRUE(c.Update());
  g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kServing);
  EXPECT_THAT(Ids(g.members), ElementsAre("b"));
  EXPECT_THAT(Ids(g.copying), ElementsAre("c"));
  EXPECT_FALSE(c.Reconfiguring("b"));
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"c"}));
  g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("b", "c"));
  EXPECT_THAT(Ids(g.copying), IsEmpty());
  EXPECT_THAT(g.joining, ElementsAre("c"));
  EXPECT_FALSE(g.forming);
  EXPECT_TRUE(c.MustFence("b"));
  EXPECT_TRUE(c.MustFence("c"));
  c.Fence("b");
  c.Fence("c");
  order = c.PushFor("b");
  ASSERT_TRUE(order.has_value());
  EXPECT_FALSE(order->wipe());
  EXPECT_THAT(Targets(*order), ElementsAre("c"));
  EXPECT_EQ(order->config(), g.config);
  EXPECT_TRUE(c.Report("b", Done(*order)));
  g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kServing);
  EXPECT_THAT(Ids(g.members), ElementsAre("b", "c"));
  EXPECT_THAT(Ids(g.serving), ElementsAre("b", "c"));
  EXPECT_THAT(g.joining, IsEmpty());
}

TEST(ReplicaGroupsTest, MemberBackBlankLeavesTheGroupAndIsCopiedInAsASpare) {
  Cluster c(2);
  c.Join({"a", "b"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  const uint64_t config = c.Group("g1").config;

  // b lost its region: its copy is gone, whatever its id.
  EXPECT_TRUE(c.Restart("b", /*recovered=*/false));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("a"));
  EXPECT_GT(g.config, config);
  EXPECT_FALSE(c.MustFence("b"));
  EXPECT_FALSE(c.Reconfiguring("b"));

  // Once a serves alone, b is a spare like any other and is copied in.
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"b"}));
  g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b"));
  EXPECT_THAT(g.joining, ElementsAre("b"));
  c.Fence("a");
  c.Fence("b");
  std::optional<proto::PushOrder> order = c.PushFor("a");
  ASSERT_TRUE(order.has_value());
  EXPECT_FALSE(order->wipe());
  EXPECT_THAT(Targets(*order), ElementsAre("b"));
}

TEST(ReplicaGroupsTest, MemberBackWithItsRegionStaysAndTheGroupReconfigures) {
  Cluster c(2);
  c.Join({"a", "b"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  const uint64_t config = c.Group("g1").config;

  // Its copy counts, but may miss half a write the other one has: the
  // copies must agree again, and both are fenced first.
  EXPECT_TRUE(c.Restart("b", /*recovered=*/true));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b"));
  EXPECT_THAT(g.joining, IsEmpty());
  EXPECT_GT(g.config, config);
  EXPECT_TRUE(c.MustFence("a"));
  EXPECT_TRUE(c.MustFence("b"));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kServing);
  EXPECT_THAT(Ids(g.serving), ElementsAre("a", "b"));
}

TEST(ReplicaGroupsTest, FailedPushStartsTheReconfigurationOver) {
  Cluster c(2);
  c.Join({"a", "b"});
  c.Fence("a");
  c.Fence("b");
  std::optional<proto::PushOrder> first = c.PushFor("a");
  ASSERT_TRUE(first.has_value());

  EXPECT_TRUE(c.Report("a", Failed(*first)));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_GT(g.config, first->config());
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b"));
  EXPECT_THAT(g.joining, ElementsAre("a", "b"));
  EXPECT_TRUE(g.forming);
  // The half-pushed target may have been written by anyone since: fence
  // again before the next push.
  EXPECT_TRUE(c.MustFence("a"));
  EXPECT_TRUE(c.MustFence("b"));
  EXPECT_FALSE(c.PushFor("a").has_value());
  // The failed order's done, arriving late, does not make the group serve.
  EXPECT_FALSE(c.Report("a", Done(*first)));
  EXPECT_EQ(c.Group("g1").state, GroupState::kReconfiguring);

  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  EXPECT_THAT(Ids(c.Group("g1").serving), ElementsAre("a", "b"));
}

// A spare the pusher cannot reach (a wrong address, a firewall) would fail
// every push: it is left out, the group serves on, and the spare is taken
// again only once it registers anew.
TEST(ReplicaGroupsTest, TargetThePusherCannotReachIsLeftOutUntilItRegistersAnew) {
  Cluster c(2);
  c.Join({"a", "b", "s"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("b");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));  // Serves on a, copies s in.
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"s"}));
  c.Fence("a");
  c.Fence("s");
  std::optional<proto::PushOrder> order = c.PushFor("a");
  ASSERT_TRUE(order.has_value());
  proto::PushProgress failed = Failed(*order);
  failed.set_failed_target("s");
  EXPECT_TRUE(c.Report("a", failed));
  EXPECT_THAT(Ids(c.Group("g1").members), ElementsAre("a"));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kServing);
  EXPECT_THAT(Ids(g.members), ElementsAre("a"));
  EXPECT_THAT(Ids(g.copying), IsEmpty());
  // Registered anew (restarted, say, with its address fixed): taken again.
  EXPECT_TRUE(c.Restart("s", /*recovered=*/false));
  EXPECT_THAT(Ids(c.Group("g1").copying), ElementsAre("s"));
}

// The push failed because the target registered anew under it (it fenced
// on its own, say): the registration it went to is left out, not the new
// one, which is copied in again at once.
TEST(ReplicaGroupsTest, TargetRegisteredAnewDuringAFailedPushIsTakenAgain) {
  Cluster c(2);
  c.Join({"a", "b", "s"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("b");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"s"}));
  c.Fence("a");
  c.Fence("s");
  std::optional<proto::PushOrder> order = c.PushFor("a");
  ASSERT_TRUE(order.has_value());
  c.Fence("s");
  proto::PushProgress failed = Failed(*order);
  failed.set_failed_target("s");
  EXPECT_TRUE(c.Report("a", failed));
  EXPECT_THAT(Ids(c.Group("g1").members), ElementsAre("a"));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  EXPECT_THAT(Ids(c.Group("g1").copying), ElementsAre("s"));
}

TEST(ReplicaGroupsTest, StaleProgressReportChangesNothing) {
  Cluster c(2);
  c.Join({"a", "b"});
  c.Fence("a");
  c.Fence("b");
  std::optional<proto::PushOrder> order = c.PushFor("a");
  ASSERT_TRUE(order.has_value());
  const std::string before = c.Serialized();

  proto::PushProgress wrong_config = Done(*order);
  wrong_config.set_config(order->config() + 1);
  EXPECT_FALSE(c.Report("a", wrong_config));
  wrong_config.set_config(order->config() - 1);
  EXPECT_FALSE(c.Report("a", wrong_config));
  // Only the member ordered to push reports on it.
  EXPECT_FALSE(c.Report("b", Done(*order)));
  EXPECT_FALSE(c.Report("b", Failed(*order)));
  proto::PushProgress other_group = Done(*order);
  other_group.set_group("g9");
  EXPECT_FALSE(c.Report("a", other_group));
  EXPECT_EQ(c.Serialized(), before);

  EXPECT_TRUE(c.Report("a", Done(*order)));
  EXPECT_EQ(c.Group("g1").state, GroupState::kServing);
  // Reported again with the next heartbeat: the order stands no more.
  const std::string serving = c.Serialized();
  EXPECT_FALSE(c.Report("a", Done(*order)));
  EXPECT_FALSE(c.Report("a", Failed(*order)));
  EXPECT_EQ(c.Serialized(), serving);
}

TEST(ReplicaGroupsTest, DoneForAConfigurationThatLostAMemberDoesNotServe) {
  Cluster c(3);
  c.Join({"a", "b", "c"});
  c.Fence("a");
  c.Fence("b");
  c.Fence("c");
  std::optional<proto::PushOrder> order = c.PushFor("a");
  ASSERT_TRUE(order.has_value());
  EXPECT_THAT(Targets(*order), ElementsAre("b", "c"));

  // c goes down before a reports: the configuration a pushed to is gone.
  EXPECT_TRUE(c.Down("c"));
  EXPECT_FALSE(c.Report("a", Done(*order)));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b"));
  EXPECT_TRUE(c.MustFence("a"));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  EXPECT_THAT(Ids(c.Group("g1").serving), ElementsAre("a", "b"));
}

// A server back blank that then registers anew under the same memory (it
// fenced itself, or restarted on the blank region file it made) still holds
// nothing of the group's: what counts is the memory's line of
// registrations, not how the last one came about.
TEST(ReplicaGroupsTest, BlankRegionStaysBlankThroughLaterRegistrations) {
  Cluster c(2);
  c.Join({"a", "b"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("a");
  c.Down("b");
  ASSERT_EQ(c.Group("g1").state, GroupState::kLost);
  c.Restart("a", /*recovered=*/false);
  c.Fence("a");
  c.Restart("a", /*recovered=*/true);
  EXPECT_EQ(c.Group("g1").state, GroupState::kLost);
  EXPECT_FALSE(c.Reconfiguring("a"));
  // b, back on its region, holds the group's writes.
  EXPECT_TRUE(c.Restart("b", /*recovered=*/true));
  EXPECT_THAT(Ids(c.Group("g1").members), ElementsAre("b"));
}

TEST(ReplicaGroupsTest, GroupWithEveryMemberDownIsLostUntilALastServingCopyReturns) {
  Cluster c(2);
  c.Join({"a", "b"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("a");
  c.Down("b");
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kLost);
  EXPECT_THAT(Ids(g.serving), ElementsAre("a", "b"));
  const uint64_t config = g.config;

  // Back blank, b holds none of the group's writes: still lost.
  EXPECT_FALSE(c.Restart("b", /*recovered=*/false));
  EXPECT_EQ(c.Group("g1").state, GroupState::kLost);
  EXPECT_FALSE(c.MustFence("b"));
  EXPECT_FALSE(c.Reconfiguring("b"));
  EXPECT_FALSE(c.PushFor("b").has_value());

  // a held every acknowledged write when the group last served.
  EXPECT_TRUE(c.Restart("a", /*recovered=*/true));
  g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("a"));
  EXPECT_GT(g.config, config);
  // Serves on a, then takes blank b back as its second copy.
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"b"}));
  g = c.Group("g1");
  EXPECT_THAT(Ids(g.serving), ElementsAre("a"));
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b"));
  EXPECT_THAT(g.joining, ElementsAre("b"));
}

TEST(ReplicaGroupsTest, LostGroupStaysLostWhenItsMembersReturnBlank) {
  Cluster c(2);
  c.Join({"a", "b"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("a");
  c.Down("b");
  c.Restart("a", /*recovered=*/false);
  c.Restart("b", /*recovered=*/false);
  // Not a fresh group either: the lost group's keys stay placed on it.
  EXPECT_THAT(c.GroupIds(), ElementsAre("g1"));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kLost);
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b"));
  EXPECT_FALSE(c.MustFence("a"));
  EXPECT_FALSE(c.PushFor("a").has_value());
  EXPECT_FALSE(c.Update());
}

TEST(ReplicaGroupsTest, PusherLostMidPushLeavesItsTargetsHalfCopiesAndTheGroupWaitsForIt) {
  Cluster c(3);
  c.Join({"a", "b", "c"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("c");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ASSERT_THAT(Ids(c.Group("g1").serving), ElementsAre("a", "b"));
  // c is back blank and copied in.
  c.Restart("c", /*recovered=*/false);
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"c"}));
  ASSERT_THAT(Ids(c.Group("g1").members), ElementsAre("a", "b", "c"));
  ASSERT_THAT(c.Group("g1").joining, ElementsAre("c"));
  c.Fence("a");
  c.Fence("b");
  c.Fence("c");
  // From the moment the push is handed out, only the pusher's copy counts.
  EXPECT_THAT(Ids(c.Group("g1").serving), ElementsAre("a", "b"));
  std::optional<proto::PushOrder> order = c.PushFor("a");
  EXPECT_THAT(Ids(c.Group("g1").serving), ElementsAre("a"));
  ASSERT_TRUE(order.has_value());
  ASSERT_THAT(Targets(*order), ElementsAre("b", "c"));

  // a goes down mid-push: b and c may each hold part of a's copy over part
  // of their own, a slot of one naming a block of the other; neither may
  // serve. The group waits for a.
  EXPECT_TRUE(c.Down("a"));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kLost);
  EXPECT_THAT(Ids(g.members), ElementsAre("a"));
  EXPECT_FALSE(c.MustFence("b"));
  EXPECT_FALSE(c.Reconfiguring("c"));
  EXPECT_FALSE(c.Report("a", Done(*order)));  // Too late.

  // a back with its region: the group serves on it, then copies b in.
  c.Restart("a", /*recovered=*/true);
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  g = c.Group("g1");
  EXPECT_THAT(Ids(g.members), ElementsAre("a"));
  EXPECT_THAT(Ids(g.copying), ElementsAre("b", "c"));
}

TEST(ReplicaGroupsTest, PusherLostBeforeItIsHandedThePushLeavesTheGroupOnTheOtherCopies) {
  Cluster c(3);
  c.Join({"a", "b", "c"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("c");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Restart("c", /*recovered=*/false);
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"c"}));
  c.Fence("a");
  c.Fence("b");
  c.Fence("c");
  // a is lost before its next heartbeat would hand it the push: nothing
  // touched b, which holds every acknowledged write. The group goes on on
  // b, and copies c in again (its live copy may lack what came after).
  EXPECT_TRUE(c.Down("a"));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("b"));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  EXPECT_THAT(Ids(c.Group("g1").serving), ElementsAre("b"));
  EXPECT_THAT(Ids(c.Group("g1").copying), ElementsAre("c"));
}

TEST(ReplicaGroupsTest, PusherLostWhileCopyingInLeavesTheGroupLostNotOnTheHalfCopy) {
  Cluster c(2);
  c.Join({"a", "b", "c"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("b");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));  // Serves on a; c copied in.
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"c"}));
  c.Fence("a");
  c.Fence("c");
  ASSERT_TRUE(c.PushFor("a").has_value());
  c.Down("a");  // Before c has a whole copy.
  // c never served the group: its copy may be half pushed.
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kLost);
  EXPECT_THAT(Ids(g.members), ElementsAre("a"));
  EXPECT_FALSE(c.Reconfiguring("c"));
  EXPECT_FALSE(c.PushFor("c").has_value());
}

TEST(ReplicaGroupsTest, SparesOfAnotherRegionSizeAreNotCopiedIn) {
  Cluster c(2);
  c.Join({"a", "b"});
  c.Join({"c"}, 2 * kRegionBytes);
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("b");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  // A push copies the region byte for byte: c's geometry is not a's.
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kServing);
  EXPECT_THAT(Ids(g.members), ElementsAre("a"));
  EXPECT_FALSE(c.Reconfiguring("c"));
  EXPECT_FALSE(c.Update());

  EXPECT_TRUE(c.Join({"d"}));
  EXPECT_THAT(Ids(c.Group("g1").copying), ElementsAre("d"));
}

TEST(ReplicaGroupsTest, NewGroupFormsOnlyOfSparesOfOneRegionSize) {
  Cluster c(2);
  c.Join({"a"});
  c.Join({"b"}, 2 * kRegionBytes);
  EXPECT_THAT(c.GroupIds(), IsEmpty());
  c.Join({"c"}, 2 * kRegionBytes);
  ASSERT_THAT(c.GroupIds(), ElementsAre("g1"));
  EXPECT_THAT(Ids(c.Group("g1").members), ElementsAre("b", "c"));
  EXPECT_EQ(c.Group("g1").region_bytes, 2 * kRegionBytes);
}

TEST(ReplicaGroupsTest, NewGroupsFormOnlyWhileEveryGroupServesWithAllItsCopies) {
  Cluster c(2);
  c.Join({"a", "b"});
  // g1 is still forming: c and d wait.
  c.Join({"c", "d"});
  EXPECT_THAT(c.GroupIds(), ElementsAre("g1"));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ASSERT_THAT(c.GroupIds(), ElementsAre("g1", "g2"));
  EXPECT_THAT(Ids(c.Group("g2").members), ElementsAre("c", "d"));
  ASSERT_TRUE(c.CompleteReconfiguration("g2"));

  // g1 is being repaired: e and f are its candidates, not a new group.
  c.Down("b");
  c.Join({"e", "f"});
  EXPECT_THAT(c.GroupIds(), ElementsAre("g1", "g2"));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"e"}));
  EXPECT_THAT(Ids(c.Group("g1").members), ElementsAre("a", "e"));
  EXPECT_THAT(c.GroupIds(), ElementsAre("g1", "g2"));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  EXPECT_THAT(c.GroupIds(), ElementsAre("g1", "g2"));  // f alone.

  c.Join({"h"});
  ASSERT_THAT(c.GroupIds(), ElementsAre("g1", "g2", "g3"));
  EXPECT_THAT(Ids(c.Group("g3").members), ElementsAre("f", "h"));
  EXPECT_TRUE(c.EachServerInOneGroupAtMost());
}

TEST(ReplicaGroupsTest, NoNewGroupWhileAGroupIsLost) {
  Cluster c(2);
  c.Join({"a", "b"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("a");
  c.Down("b");
  ASSERT_EQ(c.Group("g1").state, GroupState::kLost);
  EXPECT_FALSE(c.Join({"c", "d"}));
  EXPECT_THAT(c.GroupIds(), ElementsAre("g1"));
}

TEST(ReplicaGroupsTest, SaveThenLoadGivesTheSameGroupsAndNextGroupNumber) {
  Cluster c(2);
  c.Join({"a", "b", "c", "d"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ASSERT_TRUE(c.CompleteReconfiguration("g2"));
  c.Down("d");  // g2 reconfiguring on c.

  proto::ClusterMap map;
  c.groups().Save(&map);
  EXPECT_EQ(map.replicas(), 2u);
  EXPECT_EQ(map.next_group(), 3u);
  ReplicaGroups restored(2);
  ASSERT_TRUE(restored.Load(map).ok());
  ASSERT_EQ(restored.groups().size(), c.groups().groups().size());
  for (size_t i = 0; i < restored.groups().size(); ++i) {
    EXPECT_EQ(restored.groups()[i], c.groups().groups()[i])
        << ToProto(restored.groups()[i]).ShortDebugString();
  }
  proto::ClusterMap again;
  restored.Save(&again);
  EXPECT_EQ(again.SerializeAsString(), map.SerializeAsString());

  // The next group is g3: a reused name would be another group's keys.
  Cluster r = c.Restarted();
  ASSERT_TRUE(r.CompleteReconfiguration("g2"));
  r.Join({"e"});
  ASSERT_TRUE(r.CompleteLiveCopy("g2", {"e"}));
  ASSERT_TRUE(r.CompleteReconfiguration("g2"));  // e copied into g2.
  r.Join({"f", "h"});
  ASSERT_THAT(r.GroupIds(), ElementsAre("g1", "g2", "g3"));
  EXPECT_THAT(Ids(r.Group("g3").members), ElementsAre("f", "h"));
}

TEST(ReplicaGroupsTest, ReconfigurationGoesOnAfterACoordinatorRestart) {
  Cluster c(2);
  c.Join({"a", "b"});
  c.Fence("a");
  Cluster r = c.Restarted();
  // The orders that stood before the restart stand after it.
  EXPECT_FALSE(r.MustFence("a"));
  EXPECT_TRUE(r.MustFence("b"));
  EXPECT_TRUE(r.Reconfiguring("a"));
  EXPECT_TRUE(r.Group("g1").forming);
  r.Fence("b");
  std::optional<proto::PushOrder> order = r.PushFor("a");
  ASSERT_TRUE(order.has_value());
  EXPECT_TRUE(order->wipe());
  EXPECT_TRUE(r.Report("a", Done(*order)));
  EXPECT_EQ(r.Group("g1").state, GroupState::kServing);
}

// While a group reconfigures, its `serving` list (the last configuration
// that served) may name servers that are no longer members and still hold
// every write the group acknowledged. Here b goes down, g1 reconfigures on
// a alone (b stays in g1.serving), b comes back with its region: g2, short
// of a copy, must not take b as a spare and push its own copy over b's, as
// a may yet be lost before g1 serves, leaving b the copy g1 comes back on.
TEST(ReplicaGroupsTest, LastServingCopyOfARepairingGroupIsNotTakenByAnotherGroup) {
  Cluster c(2);
  c.Join({"a", "b", "c", "d"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  ASSERT_TRUE(c.CompleteReconfiguration("g2"));
  // g2 runs on c alone, with no spare to take.
  c.Down("d");
  ASSERT_TRUE(c.CompleteReconfiguration("g2"));
  ASSERT_THAT(Ids(c.Group("g2").members), ElementsAre("c"));

  // g1 reconfigures on a; b, one of its last serving copies, is back with
  // its region while a is still settling.
  c.Down("b");
  ASSERT_THAT(Ids(c.Group("g1").members), ElementsAre("a"));
  ASSERT_THAT(Ids(c.Group("g1").serving), ElementsAre("a", "b"));
  c.Restart("b", /*recovered=*/true);
  EXPECT_THAT(Ids(c.Group("g2").members), Not(Contains("b")))
      << "g2 would overwrite g1's last serving copy";
  EXPECT_THAT(Ids(c.Group("g2").copying), Not(Contains("b")))
      << "g2 would overwrite g1's last serving copy";

  // a is lost before g1 serves: b's copy is all g1 has left.
  c.Down("a");
  EXPECT_TRUE(c.EachServerInOneGroupAtMost());
  EXPECT_THAT(Ids(c.Group("g1").members), ElementsAre("b"));
  EXPECT_THAT(Ids(c.Group("g2").members), ElementsAre("c"));
}

// A spare is copied in while the group serves; the group pauses only for
// the short reconfiguration that follows, whose push sends the chunks that
// changed (the targets' hashes come from the coordinator with the order).
TEST(ReplicaGroupsTest, SpareIsCopiedInLiveWithNoFenceUntilItJoins) {
  Cluster c(3);
  c.Join({"a", "b", "c"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("c");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  const uint64_t config = c.Group("g1").config;
  EXPECT_TRUE(c.Join({"d"}));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kServing);
  EXPECT_EQ(g.config, config) << "clients would drop their sessions";
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b"));
  EXPECT_THAT(Ids(g.copying), ElementsAre("d"));
  EXPECT_FALSE(c.Reconfiguring("a"));
  EXPECT_FALSE(c.MustFence("d"));
  // Progress is shown, and changes nothing else.
  std::optional<proto::PushOrder> order = c.PushFor("a");
  ASSERT_TRUE(order.has_value());
  EXPECT_TRUE(order->live());
  EXPECT_FALSE(c.PushFor("b").has_value());
  proto::PushProgress partway = Done(*order);
  partway.set_done(false);
  partway.set_copied_bytes(kRegionBytes / 2);
  EXPECT_FALSE(c.Report("a", partway));
  EXPECT_EQ(c.Group("g1").copied_bytes, kRegionBytes / 2);
  EXPECT_EQ(c.Group("g1").state, GroupState::kServing);
  // Done: d joins under a fence, and the push after it is a fenced one.
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"d"}));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  g = c.Group("g1");
  EXPECT_THAT(Ids(g.members), ElementsAre("a", "b", "d"));
  EXPECT_THAT(Ids(g.serving), ElementsAre("a", "b", "d"));
  EXPECT_THAT(Ids(g.copying), IsEmpty());
}

// Two copies short, both spares are copied in one live copy.
TEST(ReplicaGroupsTest, GroupShortOfTwoCopiesCopiesTwoSparesAtOnce) {
  Cluster c(3);
  c.Join({"a", "b", "c"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("b");
  c.Down("c");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Join({"d", "e"});
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"d", "e"}));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  EXPECT_THAT(Ids(c.Group("g1").members), ElementsAre("a", "d", "e"));
}

// A second failure during the copy: the spare holds nothing the group
// counts on, so the survivors reconfigure alone and the copy starts over.
TEST(ReplicaGroupsTest, MemberLostDuringALiveCopyAbandonsItAndTheCopyStartsOver) {
  Cluster c(3);
  c.Join({"a", "b", "c"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("c");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Join({"d"});
  std::optional<proto::PushOrder> live = c.PushFor("a");
  ASSERT_TRUE(live.has_value());
  ASSERT_TRUE(live->live());

  EXPECT_TRUE(c.Down("a"));
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kReconfiguring);
  EXPECT_THAT(Ids(g.members), ElementsAre("b"));
  EXPECT_THAT(Ids(g.copying), IsEmpty());
  EXPECT_THAT(Ids(g.serving), ElementsAre("a", "b"));
  EXPECT_FALSE(c.MustFence("d"));
  // The old copy's done, arriving late, changes nothing.
  EXPECT_FALSE(c.Report("a", Done(*live)));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  // Serving on b: d is copied in again, from b.
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"d"}));
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  EXPECT_THAT(Ids(c.Group("g1").members), ElementsAre("b", "d"));
}

// The spare restarts (or goes down) mid-copy: what was copied is gone, the
// copy is abandoned and ordered again to its new registration.
TEST(ReplicaGroupsTest, SpareRestartedDuringALiveCopyIsCopiedAgain) {
  Cluster c(2);
  c.Join({"a", "b"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("b");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Join({"s"});
  std::optional<proto::PushOrder> first = c.PushFor("a");
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(c.Restart("s", /*recovered=*/false));
  // Taken again at once, under its new registration (the primary's agent
  // sees another order and copies again).
  const ReplicaGroup g = c.Group("g1");
  ASSERT_THAT(Ids(g.copying), ElementsAre("s"));
  EXPECT_THAT(g.copying, ElementsAre(Field(&Member::generation, 2u)));
  // Gone: no longer copied, nor ordered.
  c.Down("s");
  EXPECT_THAT(Ids(c.Group("g1").copying), IsEmpty());
  EXPECT_FALSE(c.PushFor("a").has_value());
  // A done that arrives late for a spare gone is ignored.
  EXPECT_FALSE(c.Report("a", Done(*first)));
  EXPECT_EQ(c.Group("g1").state, GroupState::kServing);
}

// A spare that registered anew mid-copy is copied again; a report of the
// copy to its old registration — done or failed — counts for nothing.
TEST(ReplicaGroupsTest, LiveCopyReportForAnEarlierRegistrationOfTheSpareIsIgnored) {
  Cluster c(2);
  c.Join({"a", "b"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("b");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Join({"s"});
  std::optional<proto::PushOrder> first = c.PushFor("a");
  ASSERT_TRUE(first.has_value());
  c.Fence("s");  // Fenced itself (its lease), registered anew.
  ASSERT_THAT(Ids(c.Group("g1").copying), ElementsAre("s"));
  proto::PushProgress failed = Failed(*first);
  failed.set_failed_target("s");
  EXPECT_FALSE(c.Report("a", failed));
  EXPECT_FALSE(c.Report("a", Done(*first)));
  EXPECT_THAT(Ids(c.Group("g1").copying), ElementsAre("s"));
  EXPECT_EQ(c.Group("g1").state, GroupState::kServing);
  // The copy to the registration of now is the one that counts.
  ASSERT_TRUE(c.CompleteLiveCopy("g1", {"s"}));
}

// A spare the primary cannot reach fails the live copy: it is left out
// until it registers anew, and the group serves on meanwhile.
TEST(ReplicaGroupsTest, LiveCopyToAnUnreachableSpareLeavesItOut) {
  Cluster c(2);
  c.Join({"a", "b"});
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Down("b");
  ASSERT_TRUE(c.CompleteReconfiguration("g1"));
  c.Join({"s"});
  std::optional<proto::PushOrder> order = c.PushFor("a");
  ASSERT_TRUE(order.has_value());
  proto::PushProgress failed = Failed(*order);
  failed.set_failed_target("s");
  EXPECT_TRUE(c.Report("a", failed));
  c.Update();
  ReplicaGroup g = c.Group("g1");
  EXPECT_EQ(g.state, GroupState::kServing);
  EXPECT_THAT(Ids(g.copying), IsEmpty());
  EXPECT_FALSE(c.PushFor("a").has_value());
  c.Restart("s", /*recovered=*/false);
  EXPECT_THAT(Ids(c.Group("g1").copying), ElementsAre("s"));
}

}  // namespace
}  // namespace rkv::server
