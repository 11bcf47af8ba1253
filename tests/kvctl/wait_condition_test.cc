// kvctl wait's conditions judged against readings made by hand: each one
// true and false, and the edges (nothing read, a name not there, a group
// short of copies or reconfiguring), and the parsing of what a user types.
#include "client/kvctl/wait_condition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rkv::kvctl {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

CoordinatorReading Coordinator(const std::string& id, const std::string& address, bool leading,
                               bool ready, uint64_t term = 1) {
  CoordinatorReading r;
  r.address = address;
  r.status.set_id(id);
  r.status.set_address(address);
  r.status.set_leading(leading);
  r.status.set_ready(ready);
  r.status.set_term(term);
  return r;
}

CoordinatorReading Unreachable(const std::string& address) {
  CoordinatorReading r;
  r.address = address;
  return r;
}

void AddServer(ClusterStatus& st, const std::string& id, proto::ServerState state) {
  proto::ServerInfo* s = st.map.add_servers();
  s->set_id(id);
  s->set_state(state);
}

void AddGroup(ClusterStatus& st, const std::string& id, proto::GroupState state,
              std::vector<std::string> members) {
  proto::ReplicaGroup* g = st.map.add_groups();
  g->set_id(id);
  g->set_state(state);
  for (auto& m : members) g->add_members(m);
}

// c1 leads, c2 stands by; three copies of every key.
ClusterStatus Cluster() {
  ClusterStatus st;
  st.coordinators = {Coordinator("c1", "127.0.0.1:7400", true, true, 4),
                     Coordinator("c2", "127.0.0.1:7401", false, true)};
  st.map_read = absl::OkStatus();
  st.map.set_epoch(9);
  st.map.set_replicas(3);
  return st;
}

WaitCondition Parse(std::vector<std::string> args, WaitFlags flags = {}) {
  absl::StatusOr<WaitCondition> c = ParseWaitCondition(args, flags);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : WaitCondition();
}

TEST(WaitConditionTest, ServingCountsGroupsWithEveryCopy) {
  ClusterStatus st = Cluster();
  AddGroup(st, "g1", proto::GROUP_STATE_SERVING, {"s1", "s2", "s3"});
  AddGroup(st, "g2", proto::GROUP_STATE_SERVING, {"s4", "s5"});  // Waits for a spare.
  EXPECT_TRUE(Judge(Parse({"serving"}, {.groups = "1"}), st).holds);
  EXPECT_FALSE(Judge(Parse({"serving"}, {.groups = "2"}), st).holds);
  // Every group, by default: g2 is short of a copy.
  const Verdict all = Judge(Parse({"serving"}), st);
  EXPECT_FALSE(all.holds);
  EXPECT_THAT(all.seen, HasSubstr("1 of 2 groups serve with 3 copies"));
  EXPECT_THAT(all.seen, HasSubstr("g2 serving (s4,s5)"));
  // Two copies are enough when asked for.
  EXPECT_TRUE(Judge(Parse({"serving"}, {.groups = "2", .copies = "2"}), st).holds);
  EXPECT_TRUE(Judge(Parse({"serving"}, {.copies = "2"}), st).holds);
}

TEST(WaitConditionTest, ServingFailsWhileAnyGroupReconfigures) {
  ClusterStatus st = Cluster();
  AddGroup(st, "g1", proto::GROUP_STATE_SERVING, {"s1", "s2", "s3"});
  AddGroup(st, "g2", proto::GROUP_STATE_RECONFIGURING, {"s4", "s5", "s6"});
  const Verdict v = Judge(Parse({"serving"}, {.groups = "1"}), st);
  EXPECT_FALSE(v.holds);
  EXPECT_THAT(v.seen, HasSubstr("g2 reconfiguring"));
  // A lost group stops only a wait for every group.
  st.map.mutable_groups(1)->set_state(proto::GROUP_STATE_LOST);
  EXPECT_TRUE(Judge(Parse({"serving"}, {.groups = "1"}), st).holds);
  EXPECT_FALSE(Judge(Parse({"serving"}), st).holds);
}

TEST(WaitConditionTest, ServingNeedsAGroupAndAMap) {
  ClusterStatus st = Cluster();
  EXPECT_FALSE(Judge(Parse({"serving"}), st).holds);  // No group formed yet.
  // A map of an older coordinator, without replicas: one copy.
  st.map.set_replicas(0);
  AddGroup(st, "s1", proto::GROUP_STATE_SERVING, {"s1"});
  EXPECT_TRUE(Judge(Parse({"serving"}), st).holds);
  st.map_read = absl::UnavailableError("connection refused");
  const Verdict v = Judge(Parse({"serving"}), st);
  EXPECT_FALSE(v.holds);
  EXPECT_THAT(v.seen, HasSubstr("no cluster map (connection refused)"));
}

TEST(WaitConditionTest, ServerState) {
  ClusterStatus st = Cluster();
  AddServer(st, "s1", proto::SERVER_STATE_UP);
  AddServer(st, "s2", proto::SERVER_STATE_DOWN);
  EXPECT_TRUE(Judge(Parse({"server", "s1"}, {.state = "up"}), st).holds);
  EXPECT_FALSE(Judge(Parse({"server", "s1"}, {.state = "down"}), st).holds);
  EXPECT_TRUE(Judge(Parse({"server", "s2"}, {.state = "down"}), st).holds);
  EXPECT_THAT(Judge(Parse({"server", "s2"}, {.state = "up"}), st).seen, StartsWith("s2 down"));
  EXPECT_TRUE(Judge(Parse({"server", "s2"}, {.state = "up,down"}), st).holds);
  // Not in the map: neither up nor down.
  const Verdict absent = Judge(Parse({"server", "s3"}, {.state = "down"}), st);
  EXPECT_FALSE(absent.holds);
  EXPECT_THAT(absent.seen, HasSubstr("s3 is not in the map (servers: s1, s2)"));
  st.map_read = absl::UnavailableError("no coordinator leads");
  EXPECT_FALSE(Judge(Parse({"server", "s1"}, {.state = "up"}), st).holds);
}

TEST(WaitConditionTest, Leader) {
  ClusterStatus st = Cluster();
  const Verdict any = Judge(Parse({"leader"}), st);
  EXPECT_TRUE(any.holds);
  EXPECT_EQ(any.seen, "c1 127.0.0.1:7400 leader (term 4)");
  EXPECT_TRUE(Judge(Parse({"leader", "c1"}), st).holds);
  EXPECT_TRUE(Judge(Parse({"leader", "127.0.0.1:7400"}), st).holds);
  EXPECT_FALSE(Judge(Parse({"leader", "c2"}), st).holds);
  // The leader lost: the standby has not taken over yet.
  st.coordinators[0] = Unreachable("127.0.0.1:7400");
  const Verdict none = Judge(Parse({"leader"}), st);
  EXPECT_FALSE(none.holds);
  EXPECT_EQ(none.seen, "- 127.0.0.1:7400 unreachable, c2 127.0.0.1:7401 standby");
  st.coordinators.clear();
  EXPECT_FALSE(Judge(Parse({"leader"}), st).holds);
}

TEST(WaitConditionTest, CoordinatorRole) {
  ClusterStatus st = Cluster();
  st.coordinators.push_back(Coordinator("c3", "127.0.0.1:7402", false, false));
  st.coordinators.push_back(Unreachable("127.0.0.1:7403"));
  // By default: joined, as leader or standby.
  EXPECT_TRUE(Judge(Parse({"coordinator", "c1"}), st).holds);
  EXPECT_TRUE(Judge(Parse({"coordinator", "c2"}), st).holds);
  EXPECT_FALSE(Judge(Parse({"coordinator", "c3"}), st).holds);
  EXPECT_TRUE(Judge(Parse({"coordinator", "c3"}, {.role = "starting"}), st).holds);
  EXPECT_FALSE(Judge(Parse({"coordinator", "c2"}, {.role = "leader"}), st).holds);
  // One that does not answer is known by its address alone.
  EXPECT_TRUE(Judge(Parse({"coordinator", "127.0.0.1:7403"}, {.role = "unreachable"}), st).holds);
  const Verdict unknown = Judge(Parse({"coordinator", "c9"}), st);
  EXPECT_FALSE(unknown.holds);
  EXPECT_THAT(unknown.seen, StartsWith("no coordinator c9 among c1 127.0.0.1:7400 leader"));
}

TEST(WaitConditionTest, ParseRejectsWhatItCannotWaitFor) {
  auto bad = [](std::vector<std::string> args, WaitFlags flags = {}) {
    absl::StatusOr<WaitCondition> c = ParseWaitCondition(args, flags);
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
    return std::string(c.status().message());
  };
  EXPECT_THAT(bad({}), HasSubstr("needs a condition"));
  EXPECT_THAT(bad({"servers"}), HasSubstr("unknown condition 'servers'"));
  EXPECT_THAT(bad({"serving", "2"}), HasSubstr("takes no argument"));
  EXPECT_THAT(bad({"serving"}, {.groups = "0"}), HasSubstr("--groups takes a count from 1"));
  EXPECT_THAT(bad({"serving"}, {.copies = "three"}), HasSubstr("--copies"));
  EXPECT_THAT(bad({"serving"}, {.state = "up"}), HasSubstr("does not take --state"));
  EXPECT_THAT(bad({"server"}, {.state = "up"}), HasSubstr("needs one server id"));
  EXPECT_THAT(bad({"server", "s1"}), HasSubstr("needs --state=up or --state=down"));
  EXPECT_THAT(bad({"server", "s1"}, {.state = "gone"}), HasSubstr("--state takes down, up"));
  EXPECT_THAT(bad({"server", "s1"}, {.groups = "1", .state = "up"}), HasSubstr("--groups"));
  EXPECT_THAT(bad({"leader", "c1", "c2"}), HasSubstr("one coordinator id at most"));
  EXPECT_THAT(bad({"leader"}, {.role = "leader"}), HasSubstr("does not take --role"));
  EXPECT_THAT(bad({"coordinator"}), HasSubstr("needs one coordinator id"));
  EXPECT_THAT(bad({"coordinator", "c1"}, {.role = "leader,boss"}), HasSubstr("--role takes"));
  EXPECT_EQ(Parse({"server", "s2"}, {.state = "down"}).text, "server s2 --state=down");
  EXPECT_EQ(Parse({"coordinator", "c2"}).text, "coordinator c2 --role=leader,standby");
}

TEST(WaitConditionTest, Timeout) {
  EXPECT_EQ(*ParseWaitTimeout("30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseWaitTimeout("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseWaitTimeout("2m"), absl::Minutes(2));
  EXPECT_EQ(*ParseWaitTimeout("0"), absl::ZeroDuration());
  for (const char* bad : {"30", "-1s", "soon", "", "inf"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseWaitTimeout(bad).status())) << bad;
  }
}

}  // namespace
}  // namespace rkv::kvctl
