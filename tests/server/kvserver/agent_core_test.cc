// A kvserver's membership decisions (server/kvserver/agent_core.h) against
// the real coordinator (server/kvcoord/coordinator.h), in one
// thread, on one clock moved by hand: the exchanges kvserver's agent makes
// over gRPC are made here by calling the coordinator's handlers, and a
// server cut off from the coordinator is one whose exchanges get no
// answer. What a server decides — when it registers, renews, fences
// itself, follows a coordinator that lost its registration — is what
// kvserver decides: the same code, without the threads.
#include "server/kvserver/agent_core.h"

#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/fabric/sim/sim_network.h"
#include "gtest/gtest.h"
#include "proto/coordinator_stub.h"
#include "server/kvcoord/coordinator.h"
#include "server/kvcoord/file_state_store.h"
#include "server/kvserver/region_server.h"
#include "tests/client/region/manual_clock.h"

namespace rkv::testing {
namespace {

constexpr absl::Duration kLease = absl::Milliseconds(1500);
constexpr absl::Duration kStep = absl::Milliseconds(10);

struct Node {
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<server::RegionServer> region;
  std::unique_ptr<server::AgentCore> core;
};

class AgentCoreTest : public ::testing::Test {
 protected:
  void StartCoordinator(uint32_t replicas) {
    server::CoordinatorOptions o;
    o.lease = kLease;
    o.replicas = replicas;
    o.clock = clock_.fn();
    o.lease_thread = false;
    o.simulated_fabric = true;
    coord_ = std::make_unique<server::Coordinator>(o);
    ASSERT_TRUE(coord_->Start("c1", "c1", std::make_unique<server::FileStateStore>("")).ok());
  }

  Node& AddServer(const std::string& id, uint64_t generation = 1) {
    Node& n = nodes_[id];
    n.core.reset();
    n.region.reset();
    n.fabric = net_->NewFabric();
    server::RegionServerOptions o;
    o.generation = generation;
    o.region_bytes = 1 << 20;
    o.listen_address = id;
    o.lease_thread = false;
    o.clock = clock_.fn();
    auto region = server::RegionServer::Create(*n.fabric, o);
    EXPECT_TRUE(region.ok()) << region.status();
    n.region = std::move(region).value();
    server::RegionServer* r = n.region.get();
    // Pushes carried out as they are ordered: the simulated fabric runs on
    // this thread.
    n.core = std::make_unique<server::AgentCore>(
        server::AgentCore::Options{id, "soft", 0, [] { return proto::RegionStats(); }, [] {},
                                   /*push_threads=*/false},
        *r);
    return n;
  }

  // One exchange of `n` with the coordinator, as the core asks; none
  // answers when `n` is cut off.
  absl::Status Exchange(const std::string& id) {
    Node& n = nodes_.at(id);
    const server::AgentRequest r = n.core->Next(clock_.now());
    const bool cut = cut_off_.contains(id);
    const absl::Status unreachable = absl::UnavailableError("coordinator c1: unreachable");
    if (r.kind == server::AgentRequest::Kind::kRegister) {
      proto::RegisterResponse resp;
      const absl::Status s = cut ? unreachable : coord_->Register(r.registration, &resp);
      return n.core->OnRegistered(clock_.now(), "c1", s, resp);
    }
    proto::HeartbeatResponse resp;
    absl::Status s = cut ? unreachable : coord_->Heartbeat(r.heartbeat, &resp);
    const bool stale = s.ok() && n.core->Stale(resp.term());
    if (stale) s = absl::UnavailableError("a deposed coordinator's term");
    return n.core->OnHeartbeat(clock_.now(), "c1", s, stale, resp);
  }

  // Simulated time passes in steps: every server exchanges when its core
  // says it is due, and the coordinator checks leases. Stops early, and
  // returns true, once `until` holds.
  bool RunFor(absl::Duration d, const std::function<bool()>& until = {}) {
    for (absl::Duration t; t < d; t += kStep) {
      clock_.Advance(kStep);
      for (auto& [id, n] : nodes_) {
        if (n.core->Due(clock_.now())) {
          const absl::Status s = Exchange(id);
          EXPECT_TRUE(s.ok()) << id << ": " << s;
        }
      }
      coord_->CheckLeases();
      if (until && until()) return true;
    }
    return false;
  }

  proto::ClusterMap Map() {
    proto::ClusterMap map;
    EXPECT_TRUE(coord_->GetClusterMap(&map).ok());
    return map;
  }
  proto::ServerState StateOf(const std::string& id) {
    const proto::ClusterMap map = Map();
    for (const proto::ServerInfo& s : map.servers()) {
      if (s.id() == id) return s.state();
    }
    return proto::SERVER_STATE_UNSPECIFIED;
  }
  bool GroupServes() {
    const proto::ClusterMap m = Map();
    return m.groups_size() == 1 && m.groups(0).state() == proto::GROUP_STATE_SERVING &&
           static_cast<uint32_t>(m.groups(0).members_size()) == m.replicas();
  }

  ManualClock clock_;
  std::shared_ptr<fabric::SimNetwork> net_ = std::make_shared<fabric::SimNetwork>(1);
  std::unique_ptr<server::Coordinator> coord_;
  std::map<std::string, Node> nodes_;
  std::set<std::string> cut_off_;
};

TEST_F(AgentCoreTest, AServerRegistersAndKeepsItsLease) {
  StartCoordinator(1);
  AddServer("s1");
  RunFor(10 * kLease);
  const server::AgentCore& core = *nodes_.at("s1").core;
  EXPECT_TRUE(core.registered());
  EXPECT_EQ(StateOf("s1"), proto::SERVER_STATE_UP);
  // A heartbeat every third of a lease with one copy: about 30 in ten
  // leases, and none failed.
  const server::AgentCore::Counters c = core.counters();
  EXPECT_GE(c.renewals, 25u);
  EXPECT_LE(c.renewals, 35u);
  EXPECT_EQ(c.renewal_failures, 0u);
  EXPECT_EQ(c.fences, 0u);
}

TEST_F(AgentCoreTest, AReplicatedServerCutOffFencesItselfBeforeItsGroupIsGivenAway) {
  StartCoordinator(2);
  AddServer("s1");
  AddServer("s2");
  ASSERT_TRUE(RunFor(20 * kLease, [this] { return GroupServes(); }));
  RunFor(kLease);  // Settled: heartbeats at their pace.
  const uint64_t fences = nodes_.at("s1").core->counters().fences;
  const uint64_t generation = nodes_.at("s1").region->generation();

  cut_off_.insert("s1");
  const absl::Time cut = clock_.now();
  absl::Time fenced_at = absl::InfiniteFuture();
  absl::Time down_at = absl::InfiniteFuture();
  RunFor(3 * kLease, [&] {
    if (fenced_at == absl::InfiniteFuture() && nodes_.at("s1").core->counters().fences > fences) {
      fenced_at = clock_.now();
    }
    if (down_at == absl::InfiniteFuture() && StateOf("s1") == proto::SERVER_STATE_DOWN) {
      down_at = clock_.now();
    }
    return fenced_at != absl::InfiniteFuture() && down_at != absl::InfiniteFuture();
  });
  // Three quarters of a lease after its last renewal at most, and before
  // the coordinator, which heard that renewal later, gives up on it.
  EXPECT_LE(fenced_at - cut, kLease * 3 / 4 + kStep);
  EXPECT_LT(fenced_at, down_at);
  EXPECT_NE(nodes_.at("s1").region->generation(), generation);  // A new rkey: old clients shut out.
  EXPECT_FALSE(nodes_.at("s1").core->registered());

  // Back in reach, it registers again and the group takes it back.
  cut_off_.clear();
  EXPECT_TRUE(RunFor(20 * kLease,
                     [this] { return StateOf("s1") == proto::SERVER_STATE_UP && GroupServes(); }));
}

TEST_F(AgentCoreTest, AServerWhoseRegistrationTheCoordinatorLostRegistersAgainAtOnce) {
  StartCoordinator(2);
  AddServer("s1");
  AddServer("s2");
  ASSERT_TRUE(RunFor(20 * kLease, [this] { return GroupServes(); }));
  const uint64_t fences = nodes_.at("s1").core->counters().fences;

  // A coordinator started afresh, its state lost: it knows no server.
  coord_.reset();
  StartCoordinator(2);
  server::AgentCore& core = *nodes_.at("s1").core;
  const uint64_t generation = nodes_.at("s1").region->generation();
  // The first heartbeat it refuses.
  ASSERT_TRUE(RunFor(kLease, [&] { return !core.registered(); }));
  // Replicated, whatever group it served in may have gone on without it:
  // it fenced before anything else, and is due to register at once.
  EXPECT_EQ(core.counters().fences, fences + 1);
  EXPECT_NE(nodes_.at("s1").region->generation(), generation);
  EXPECT_TRUE(core.Due(clock_.now()));
  EXPECT_TRUE(RunFor(20 * kLease, [this] { return GroupServes(); }));
}

TEST_F(AgentCoreTest, GenerationsOnlyGrowForAServerId) {
  StartCoordinator(2);
  // s1 started on a clock an hour ahead: its generation (a wall-clock
  // stamp) is an hour ahead too.
  const uint64_t now_ms = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  const uint64_t ahead = now_ms + 3600 * 1000;
  AddServer("s1", ahead);
  AddServer("s2", now_ms);
  ASSERT_TRUE(RunFor(20 * kLease, [this] { return GroupServes(); }));

  // A registration of s1 older than the one stored (it came late, or
  // twice) replaces nothing: the coordinator answers that it is below.
  const auto s1 = [this]() -> proto::ServerInfo {
    const proto::ClusterMap map = Map();
    for (const proto::ServerInfo& s : map.servers()) {
      if (s.id() == "s1") return s;
    }
    return {};
  };
  const proto::ServerInfo before = s1();
  const uint64_t registered = before.region().generation();
  ASSERT_GE(registered, ahead);
  proto::RegisterRequest late;
  late.set_id("s1");
  *late.mutable_region() = before.region();
  late.mutable_region()->set_generation(registered - 1);
  proto::RegisterResponse answer;
  ASSERT_TRUE(coord_->Register(late, &answer).ok());
  EXPECT_EQ(answer.fence_above(), registered);
  EXPECT_EQ(s1().region().generation(), registered);
  EXPECT_EQ(s1().lineage(), before.lineage());
  EXPECT_FALSE(RunFor(kLease, [this] { return !GroupServes(); })) << "the group stopped serving";

  // s1 restarts blank on a clock set back to the true time: its
  // generation is below the registered one. It fences above it, and
  // registers as the new memory it is.
  Node& n = AddServer("s1", now_ms);
  ASSERT_TRUE(Exchange("s1").ok());
  EXPECT_FALSE(n.core->registered());
  EXPECT_EQ(n.core->counters().fences, 1u);
  EXPECT_GT(n.region->generation(), registered);
  EXPECT_EQ(s1().region().generation(), registered);
  ASSERT_TRUE(RunFor(20 * kLease, [&] {
    return n.core->registered() && StateOf("s1") == proto::SERVER_STATE_UP && GroupServes();
  }));
  EXPECT_NE(s1().lineage(), before.lineage());
}

TEST_F(AgentCoreTest, AnswersOfADeposedCoordinatorAreIgnored) {
  // One copy: a server that does not fence itself for an old lease.
  StartCoordinator(1);
  AddServer("s1");
  ASSERT_TRUE(RunFor(20 * kLease, [this] { return GroupServes(); }));
  server::AgentCore& core = *nodes_.at("s1").core;
  // The term the coordinator leads under now, as it answered.
  proto::CoordinatorStatus status;
  ASSERT_TRUE(coord_->Describe(&status).ok());
  ASSERT_GE(status.term(), 1u);
  EXPECT_FALSE(core.Stale(status.term()));
  EXPECT_FALSE(core.Stale(status.term() + 1));  // A newer leader is followed.

  // A deposed coordinator orders a fence: its answer is no answer. Nothing
  // is renewed, nothing fenced, and the server stays registered while the
  // lease the leader gave it holds.
  proto::HeartbeatResponse deposed;
  deposed.set_term(status.term() - 1);
  deposed.set_fence(true);
  deposed.set_lease_ms(absl::ToInt64Milliseconds(kLease));
  const uint64_t fences = core.counters().fences;
  const absl::Time renewed_until = core.FenceBy();
  ASSERT_TRUE(core.Stale(deposed.term()));
  (void)core.Next(clock_.now());
  ASSERT_TRUE(
      core.OnHeartbeat(clock_.now(), "c0", absl::UnavailableError("deposed"), true, deposed).ok());
  EXPECT_EQ(core.counters().fences, fences);
  EXPECT_EQ(core.FenceBy(), renewed_until);
  EXPECT_TRUE(core.registered());

  // Only deposed coordinators for a whole lease: the one that leads now
  // started afresh, and registering again takes its term.
  clock_.Advance(kLease + kStep);
  (void)core.Next(clock_.now());
  ASSERT_TRUE(
      core.OnHeartbeat(clock_.now(), "c0", absl::UnavailableError("deposed"), true, deposed).ok());
  EXPECT_FALSE(core.registered());
  EXPECT_EQ(core.counters().fences, fences);
}

TEST_F(AgentCoreTest, ACoordinatorThatRefusesTheServerStopsIt) {
  StartCoordinator(1);
  Node& n = AddServer("s1");
  (void)n.core->Next(clock_.now());
  const absl::Status s = n.core->OnRegistered(
      clock_.now(), "c1", absl::UnauthenticatedError("coordinator c1: missing or wrong token"), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(s.message().find("refused this server"), absl::string_view::npos) << s;
  // An outage is not a refusal: the server goes on trying.
  (void)n.core->Next(clock_.now());
  EXPECT_TRUE(n.core->OnRegistered(clock_.now(), "c1", absl::UnavailableError("down"), {}).ok());
  EXPECT_EQ(n.core->counters().renewal_failures, 2u);
}

}  // namespace
}  // namespace rkv::testing
