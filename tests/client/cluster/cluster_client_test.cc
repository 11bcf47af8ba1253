// The real cluster client (client/cluster/cluster_client.cc) in one thread
// on the deterministic fabric: two region servers, a map fed by hand
// (OpenOptions::map_source), connects and map fetches run when the test
// says (OpenOptions::executor), and a clock moved by hand. No thread and no
// sleep: a run is fixed by the network's seed. What it checks is what a
// user of rkv::Client relies on when the map changes under it: keys go to
// their group; a session that a new map retires finishes what it holds;
// operations parked on a reconfiguring group complete once it serves, or
// fail once they waited the parking limit; a GET that met a stale rkey is
// retried on the map fetched after it; and every callback runs once.
#include "client/cluster/cluster_client.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cluster/executor.h"
#include "client/cluster/map_source.h"
#include "client/cluster/retry_policy.h"
#include "client/cluster/routing.h"
#include "client/region/region_client.h"
#include "common/fabric/sim/sim_network.h"
#include "gtest/gtest.h"
#include "server/kvserver/region_server.h"
#include "tests/client/cluster/sim_cluster_parts.h"
#include "tests/client/region/manual_clock.h"

namespace rkv::testing {
namespace {

struct Server {
  std::string id;
  std::unique_ptr<fabric::Fabric> fabric;  // Goes after the region.
  std::unique_ptr<server::RegionServer> region;
};

// What each operation's callback saw, and how often it ran.
struct Outcomes {
  std::vector<int> calls;
  std::vector<absl::Status> status;
  std::vector<std::string> values;

  size_t Add() {
    calls.push_back(0);
    status.emplace_back();
    values.emplace_back();
    return calls.size() - 1;
  }
  Client::DoneCallback Done() {
    const size_t i = Add();
    return [this, i](absl::Status s) {
      calls[i]++;
      status[i] = std::move(s);
    };
  }
  Client::GetCallback Got() {
    const size_t i = Add();
    return [this, i](absl::StatusOr<std::string> v) {
      calls[i]++;
      status[i] = v.status();
      if (v.ok()) values[i] = *std::move(v);
    };
  }
  bool AllDone() const {
    for (int c : calls) {
      if (c == 0) return false;
    }
    return true;
  }
  int Finished() const {
    int n = 0;
    for (int c : calls) n += c > 0;
    return n;
  }
  // Every callback ran exactly once.
  void ExpectOnce() const {
    for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i], 1) << "operation " << i;
  }
};

class ClusterClientTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kSeed = 39;

  void SetUp() override {
    for (const char* id : {"s1", "s2"}) {
      Server& sv = servers_.emplace_back();
      sv.id = id;
      sv.fabric = net_->NewFabric();
      server::RegionServerOptions so;
      so.region_bytes = 4 << 20;
      so.listen_address = id;
      so.lease_thread = false;  // One thread; nothing here fences a client.
      so.reclaim = false;
      so.clock = clock_.fn();
      absl::StatusOr<std::unique_ptr<server::RegionServer>> region =
          server::RegionServer::Create(*sv.fabric, so);
      ASSERT_TRUE(region.ok()) << region.status();
      sv.region = std::move(region).value();
    }
  }

  proto::ServerInfo Info(const Server& sv) const {
    proto::ServerInfo info;
    info.set_id(sv.id);
    info.set_state(proto::SERVER_STATE_UP);
    const fabric::RemoteRegion a = sv.region->address();
    proto::RegionDescriptor& r = *info.mutable_region();
    r.mutable_endpoint()->set_address(a.endpoint.address);
    r.set_base_address(a.base);
    r.set_length(a.length);
    r.set_rkey(a.rkey);
    r.set_generation(sv.region->generation());
    return info;
  }

  // Groups g1 (on s1) and g2 (on s2), one copy each, in the states and
  // configurations given.
  proto::ClusterMap Map(uint64_t epoch, proto::GroupState g1 = proto::GROUP_STATE_SERVING,
                        uint64_t g1_config = 1) const {
    proto::ClusterMap map;
    map.set_epoch(epoch);
    map.set_lease_ms(absl::ToInt64Milliseconds(kLease));
    map.set_replicas(1);
    for (int i = 0; i < 2; ++i) {
      *map.add_servers() = Info(servers_[i]);
      proto::ReplicaGroup& g = *map.add_groups();
      g.set_id(absl::StrCat("g", i + 1));
      g.add_members(servers_[i].id);
      g.add_generations(servers_[i].region->generation());
      g.set_state(i == 0 ? g1 : proto::GROUP_STATE_SERVING);
      g.set_config(i == 0 ? g1_config : 1);
    }
    return map;
  }

  std::unique_ptr<Client> Open() {
    client_internal::OpenOptions o;
    o.fabric = net_->NewFabric();
    o.seed = net_->NextSeed();
    o.clock = clock_.fn();
    o.scratch_bytes = 4 << 20;
    o.map_source = maps_;
    o.executor = [this] {
      auto e = std::make_unique<StepExecutor>();
      executor_ = e.get();
      return e;
    };
    absl::StatusOr<std::unique_ptr<Client>> c = client_internal::OpenCluster("sim", o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Polls `c` (running the jobs it queued) until `done`; false if that
  // never comes.
  bool PollUntil(Client& c, const std::function<bool()>& done) {
    for (int i = 0; i < 100000; ++i) {
      if (done()) return true;
      executor_->RunQueued();
      c.Poll(absl::ZeroDuration());
    }
    return done();
  }
  // Polls `c` a while without running its jobs.
  void PollIdle(Client& c, int times = 200) {
    for (int i = 0; i < times; ++i) c.Poll(absl::ZeroDuration());
  }

  // The `n`th key whose group is `group` (g1 or g2).
  static std::string KeyOf(const std::string& group, int n) {
    for (int i = 0;; ++i) {
      const std::string key = absl::StrCat("key", i);
      const bool g1 =
          client_internal::RendezvousScore("g1", key) > client_internal::RendezvousScore("g2", key);
      if ((group == "g1") == g1 && n-- == 0) return key;
    }
  }

  // A session of the test's own on `sv`'s region, to see what it holds.
  std::unique_ptr<client_internal::RegionClient> Direct(const Server& sv) {
    client_internal::OpenOptions o;
    o.fabric = net_->NewFabric();
    o.seed = net_->NextSeed();
    o.clock = clock_.fn();
    o.scratch_bytes = 4 << 20;
    absl::StatusOr<std::unique_ptr<client_internal::RegionClient>> c =
        client_internal::OpenRegion(sv.region->address(), o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  static constexpr absl::Duration kLease = absl::Seconds(1);
  std::shared_ptr<fabric::SimNetwork> net_ = std::make_shared<fabric::SimNetwork>(kSeed);
  ManualClock clock_;
  std::vector<Server> servers_;
  std::shared_ptr<HandMaps> maps_ = std::make_shared<HandMaps>();
  StepExecutor* executor_ = nullptr;  // The open client's.
};

TEST_F(ClusterClientTest, KeysGoToTheirGroup) {
  maps_->Push(Map(1));
  std::unique_ptr<Client> c = Open();
  ASSERT_NE(c, nullptr);
  Outcomes out;
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(absl::StrCat("key", i));
    c->PutAsync(keys.back(), absl::StrCat("v", i), out.Done());
  }
  ASSERT_TRUE(PollUntil(*c, [&] { return out.AllDone(); }));
  out.ExpectOnce();
  for (const absl::Status& s : out.status) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(c->in_flight(), 0u);

  // Each key is in its group's server's region, and only there.
  std::map<std::string, int> per_group;
  std::unique_ptr<client_internal::RegionClient> s1 = Direct(servers_[0]);
  std::unique_ptr<client_internal::RegionClient> s2 = Direct(servers_[1]);
  ASSERT_NE(s1, nullptr);
  ASSERT_NE(s2, nullptr);
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool g1 = client_internal::RendezvousScore("g1", keys[i]) >
                    client_internal::RendezvousScore("g2", keys[i]);
    per_group[g1 ? "g1" : "g2"]++;
    absl::StatusOr<std::string> home = (g1 ? s1 : s2)->Get(keys[i]);
    absl::StatusOr<std::string> other = (g1 ? s2 : s1)->Get(keys[i]);
    ASSERT_TRUE(home.ok()) << keys[i] << ": " << home.status();
    EXPECT_EQ(*home, absl::StrCat("v", i));
    EXPECT_TRUE(absl::IsNotFound(other.status())) << keys[i] << ": " << other.status();
  }
  EXPECT_GT(per_group["g1"], 0);
  EXPECT_GT(per_group["g2"], 0);
}

TEST_F(ClusterClientTest, RetiredSessionDrainsWhatItHolds) {
  maps_->Push(Map(1));
  std::unique_ptr<Client> c = Open();
  ASSERT_NE(c, nullptr);
  Outcomes out;
  c->PutAsync(KeyOf("g1", 0), "first", out.Done());  // Connects g1's session.
  ASSERT_TRUE(PollUntil(*c, [&] { return out.AllDone(); }));
  const int connects = executor_->runs();

  // Writes in g1's session, then a map that reconfigured g1 (same server):
  // the next operation takes the map, and the session is retired.
  constexpr int kWrites = 24;
  for (int i = 0; i < kWrites; ++i) c->PutAsync(KeyOf("g1", i), absl::StrCat("w", i), out.Done());
  c->Poll(absl::ZeroDuration());
  ASSERT_GT(c->in_flight(), 0u);
  maps_->Push(Map(2, proto::GROUP_STATE_SERVING, 2));
  c->GetAsync(KeyOf("g1", 0), out.Got());
  EXPECT_EQ(executor_->queued(), 1u) << "a new session for g1's new configuration";

  // The retired session finishes its writes on its own connection; the
  // GET goes to the new session once it connects.
  ASSERT_TRUE(PollUntil(*c, [&] { return out.AllDone(); }));
  out.ExpectOnce();
  for (size_t i = 0; i < out.status.size(); ++i) EXPECT_TRUE(out.status[i].ok()) << out.status[i];
  EXPECT_EQ(out.values.back(), "w0");
  EXPECT_EQ(executor_->runs(), connects + 1);
  EXPECT_EQ(c->in_flight(), 0u);
  EXPECT_EQ(c->costs(OpType::kPut).ops, kWrites + 1u) << "the retired session's costs are kept";
}

TEST_F(ClusterClientTest, ClosingCompletesEveryOperationOnce) {
  maps_->Push(Map(1, proto::GROUP_STATE_RECONFIGURING));
  Outcomes out;
  {
    std::unique_ptr<Client> c = Open();
    ASSERT_NE(c, nullptr);
    // Parked on g1; waiting for g2's session to connect; then in g2's
    // session once it has.
    for (int i = 0; i < 4; ++i) c->PutAsync(KeyOf("g1", i), "p", out.Done());
    for (int i = 0; i < 4; ++i) c->PutAsync(KeyOf("g2", i), "w", out.Done());
    PollIdle(*c, 3);
    executor_->RunQueued();
    c->Poll(absl::ZeroDuration());
    for (int i = 4; i < 8; ++i) c->GetAsync(KeyOf("g2", i), out.Got());
    EXPECT_EQ(out.Finished(), 0);
    EXPECT_EQ(c->in_flight(), 12u);
  }
  out.ExpectOnce();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(absl::IsCancelled(out.status[i])) << out.status[i];
  }
}

TEST_F(ClusterClientTest, ParkedOperationsRunOnceTheirGroupServes) {
  maps_->Push(Map(1, proto::GROUP_STATE_RECONFIGURING));
  std::unique_ptr<Client> c = Open();
  ASSERT_NE(c, nullptr);
  Outcomes parked, other;
  for (int i = 0; i < 6; ++i) c->PutAsync(KeyOf("g1", i), absl::StrCat("p", i), parked.Done());
  c->GetAsync(KeyOf("g1", 6), parked.Got());  // A key nobody wrote.
  c->PutAsync(KeyOf("g2", 0), "x", other.Done());
  ASSERT_TRUE(PollUntil(*c, [&] { return other.AllDone(); }));
  EXPECT_TRUE(other.status[0].ok()) << other.status[0];

  // Within the parking limit they wait, whatever the time.
  clock_.Advance(client_internal::ParkingLimit(kLease) / 2);
  PollIdle(*c);
  EXPECT_EQ(parked.Finished(), 0);

  maps_->Push(Map(2, proto::GROUP_STATE_SERVING, 2));
  ASSERT_TRUE(PollUntil(*c, [&] { return parked.AllDone(); }));
  parked.ExpectOnce();
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(parked.status[i].ok()) << parked.status[i];
  EXPECT_TRUE(absl::IsNotFound(parked.status[6])) << parked.status[6];
  EXPECT_EQ(c->in_flight(), 0u);
  Outcomes after;
  c->GetAsync(KeyOf("g1", 3), after.Got());
  ASSERT_TRUE(PollUntil(*c, [&] { return after.AllDone(); }));
  EXPECT_EQ(after.values[0], "p3") << after.status[0];
}

TEST_F(ClusterClientTest, ParkedOperationsFailOnceTheLimitPasses) {
  maps_->Push(Map(1, proto::GROUP_STATE_RECONFIGURING));
  std::unique_ptr<Client> c = Open();
  ASSERT_NE(c, nullptr);
  Outcomes parked;
  for (int i = 0; i < 5; ++i) c->PutAsync(KeyOf("g1", i), "p", parked.Done());
  c->GetAsync(KeyOf("g1", 5), parked.Got());
  PollIdle(*c);

  clock_.Advance(client_internal::ParkingLimit(kLease) - absl::Milliseconds(1));
  PollIdle(*c);
  EXPECT_EQ(parked.Finished(), 0) << "failed before the parking limit";

  clock_.Advance(absl::Milliseconds(1));
  c->Poll(absl::ZeroDuration());
  EXPECT_TRUE(parked.AllDone()) << "the limit passed: every parked operation fails at once";
  PollIdle(*c);
  parked.ExpectOnce();
  for (const absl::Status& s : parked.status) {
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "still reconfiguring")) << s;
  }
  EXPECT_EQ(c->in_flight(), 0u);
  EXPECT_EQ(executor_->runs(), 0) << "no session opened for a group that never served";
}

TEST_F(ClusterClientTest, GetRetriedOnTheMapFetchedAfterARemoteAccessError) {
  maps_->Push(Map(1));
  std::unique_ptr<Client> c = Open();
  ASSERT_NE(c, nullptr);
  const std::string key = KeyOf("g1", 0);
  Outcomes put;
  c->PutAsync(key, "kept", put.Done());
  ASSERT_TRUE(PollUntil(*c, [&] { return put.AllDone(); }));
  ASSERT_TRUE(put.status[0].ok()) << put.status[0];

  // s1 registers its memory anew (as a restart from its region file or a
  // fence does): the client's rkey is stale, and the map that says so is
  // one the client missed the push of.
  ASSERT_TRUE(servers_[0].region->Fence(servers_[0].region->generation() + 1).ok());
  maps_->Set(Map(2));
  const int fetches = maps_->fetches();

  Outcomes get;
  c->GetAsync(key, get.Got());
  // The GET fails on the stale rkey and waits for a fetch; it runs only
  // when the executor runs it.
  for (int i = 0; i < 2000 && executor_->queued() == 0; ++i) c->Poll(absl::ZeroDuration());
  ASSERT_EQ(executor_->queued(), 1u) << "a fetch of the map";
  PollIdle(*c);
  EXPECT_EQ(get.Finished(), 0) << "an Unavailable GET is retried, not failed";
  EXPECT_EQ(maps_->fetches(), fetches);

  ASSERT_TRUE(PollUntil(*c, [&] { return get.AllDone(); }));
  get.ExpectOnce();
  ASSERT_TRUE(get.status[0].ok()) << get.status[0];
  EXPECT_EQ(get.values[0], "kept");
  EXPECT_EQ(maps_->fetches(), fetches + 1);
  const OpStats stats = c->stats(OpType::kGet);
  EXPECT_EQ(stats.outcomes[static_cast<int>(OpOutcome::kOk)], 1u) << "counted once";
  EXPECT_EQ(stats.outcomes[static_cast<int>(OpOutcome::kUnavailable)], 0u);
}

}  // namespace
}  // namespace rkv::testing
