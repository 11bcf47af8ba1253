// A replica group's wire form: what goes out comes back the same, and a
// message whose parallel lists are not in step is refused, not trusted.
#include "server/kvcoord/replica_group_codec.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rkvpb/coordinator.pb.h"
#include "server/kvcoord/replica_group.h"

namespace rkv::server {
namespace {

using ::testing::ElementsAre;

ReplicaGroup Reconfiguring() {
  return {.id = "g1",
          .state = GroupState::kReconfiguring,
          .config = 7,
          .region_bytes = 1 << 20,
          .members = {{"a", 3}, {"b", 5}, {"c", 2}},
          .joining = {"c"},
          .serving = {{"a", 3}},
          .copied_bytes = 100,
          .copy_bytes = 400};
}

TEST(ReplicaGroupCodecTest, GroupComesBackAsItWent) {
  ReplicaGroup live = {.id = "g2",
                       .state = GroupState::kServing,
                       .config = 2,
                       .region_bytes = 1 << 20,
                       .members = {{"a", 4}},
                       .serving = {{"a", 4}},
                       .copying = {{"d", 9}, {"e", 1}}};
  for (const ReplicaGroup& g : {Reconfiguring(), live}) {
    absl::StatusOr<ReplicaGroup> back = FromProto(ToProto(g));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, g) << ToProto(*back).ShortDebugString();
  }
  // The wire form clients and older coordinators read: ids and
  // generations in the same order.
  const proto::ReplicaGroup p = ToProto(Reconfiguring());
  EXPECT_EQ(p.state(), proto::GROUP_STATE_RECONFIGURING);
  EXPECT_THAT(p.members(), ElementsAre("a", "b", "c"));
  EXPECT_THAT(p.generations(), ElementsAre(3u, 5u, 2u));
  EXPECT_THAT(p.serving(), ElementsAre("a"));
  EXPECT_THAT(p.serving_generations(), ElementsAre(3u));
}

TEST(ReplicaGroupCodecTest, ListsOutOfStepAreRefused) {
  proto::ReplicaGroup p = ToProto(Reconfiguring());
  p.add_generations(8);
  EXPECT_EQ(FromProto(p).status().code(), absl::StatusCode::kInvalidArgument);

  p = ToProto(Reconfiguring());
  p.add_serving("b");
  EXPECT_EQ(FromProto(p).status().code(), absl::StatusCode::kInvalidArgument);

  p = ToProto(Reconfiguring());
  p.add_copying_generations(1);
  EXPECT_EQ(FromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReplicaGroupCodecTest, GroupOfNoKnownStateOrWithoutAPrimaryIsRefused) {
  proto::ReplicaGroup p = ToProto(Reconfiguring());
  p.set_state(proto::GROUP_STATE_UNSPECIFIED);
  EXPECT_EQ(FromProto(p).status().code(), absl::StatusCode::kInvalidArgument);

  p = ToProto(Reconfiguring());
  p.clear_members();
  p.clear_generations();
  EXPECT_EQ(FromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
}

// A coordinator before the domain types left a lost group's generations as
// they were when it was lost, and set its members to its serving copies:
// its state files still load.
TEST(ReplicaGroupCodecTest, LostGroupOfAnOlderCoordinatorLoads) {
  proto::ReplicaGroup p = ToProto(Reconfiguring());
  p.set_state(proto::GROUP_STATE_LOST);
  p.clear_members();
  p.add_members("a");
  p.clear_joining();
  absl::StatusOr<ReplicaGroup> g = FromProto(p);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->state, GroupState::kLost);
  EXPECT_THAT(g->members, ElementsAre(Member{"a", 3}));

  // Not its serving copies: out of step.
  p.set_members(0, "b");
  EXPECT_EQ(FromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rkv::server
