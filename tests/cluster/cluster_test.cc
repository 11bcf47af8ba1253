// Multi-process tests of a cluster on loopback: a kvcoord and kvservers as
// real processes, killed with SIGKILL and restarted, and clients that must
// keep every acknowledged write.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cluster/cluster_client.h"
#include "common/fabric/fabric.h"
#include "common/fabric/faulty_fabric.h"
#include "gtest/gtest.h"
#include "proto/coordinator_stub.h"
#include "rkv/client.h"
#include "tests/cluster/cluster_fixture.h"

namespace rkv {
namespace {

using testing::kLeaseMs;
constexpr const char* kToken = testing::kClusterToken;

class ClusterTest : public testing::ClusterFixture {
 protected:
  std::unique_ptr<Client> OpenClient() {
    ClientOptions o;
    o.fabric_kind = "soft";
    o.cluster_token = kToken;
    o.scratch_bytes = 4 << 20;
    auto c = Client::OpenCluster(address_, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }
};

TEST_F(ClusterTest, KeysSpreadOverThreeServers) {
  StartThree();
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  constexpr int kKeys = 300;
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(client->Put(absl::StrCat("k", i), "v").ok());
  // The servers' heartbeats report the slots in use.
  proto::ClusterMap map;
  ASSERT_TRUE(WaitForMap([&](const proto::ClusterMap& m) {
    uint64_t used = 0;
    for (const auto& s : m.servers()) used += s.stats().slots_used();
    map = m;
    return used == kKeys;
  }));
  for (const auto& s : map.servers()) {
    EXPECT_GT(s.stats().slots_used(), uint64_t{kKeys / 6}) << s.id() << " holds too few keys";
  }
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(*client->Get(absl::StrCat("k", i)), "v");
}

TEST_F(ClusterTest, KilledServerIsMarkedDownAndRestartsWithItsKeys) {
  StartThree();
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  constexpr int kKeys = 200;
  for (int round = 1; round <= 2; ++round) {
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_TRUE(client->Put(absl::StrCat("k", i), absl::StrCat("v", round, "-", i)).ok());
    }
  }
  servers_["s2"]->Kill(SIGKILL);
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(WaitForMap(
      [](const proto::ClusterMap& m) { return CountState(m, proto::SERVER_STATE_DOWN) == 1; }));
  EXPECT_LT(absl::Now() - killed, absl::Milliseconds(3 * kLeaseMs));
  // Keys of s2 fail fast; the others are served as before.
  int unavailable = 0;
  for (int i = 0; i < kKeys; ++i) {
    const absl::Time t0 = absl::Now();
    auto v = client->Get(absl::StrCat("k", i));
    if (v.ok()) {
      EXPECT_EQ(*v, absl::StrCat("v2-", i));
    } else {
      EXPECT_TRUE(absl::IsUnavailable(v.status())) << v.status();
      EXPECT_LT(absl::Now() - t0, absl::Seconds(3)) << "a down server's key must fail fast";
      unavailable++;
    }
  }
  EXPECT_GT(unavailable, 0);
  EXPECT_LT(unavailable, kKeys);
  // Back from its region file, with a new generation and rkey: every
  // acknowledged key reads its last value, through the same client, once
  // it follows the map to the epoch that has s2 up (a moment after the
  // coordinator's).
  StartServer("s2");
  ASSERT_TRUE(WaitForMap(
      [](const proto::ClusterMap& m) { return CountState(m, proto::SERVER_STATE_UP) == 3; }));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  int failing = kKeys;
  while (failing > 0 && absl::Now() < deadline) {
    failing = 0;
    for (int i = 0; i < kKeys; ++i) failing += !client->Get(absl::StrCat("k", i)).ok();
  }
  for (int i = 0; i < kKeys; ++i) {
    auto v = client->Get(absl::StrCat("k", i));
    ASSERT_TRUE(v.ok()) << "k" << i << ": " << v.status();
    EXPECT_EQ(*v, absl::StrCat("v2-", i));
  }
}

// Client::stats counts each operation once, when its callback runs, by
// what the callback was told — a lost server's keys as Unavailable — with
// its latency from the call in one bucket.
TEST_F(ClusterTest, TheClientCountsEachOperationByOutcomeOnceWithItsLatency) {
  StartThree();
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  auto count = [&](OpType type, OpOutcome outcome) {
    return client->stats(type).outcomes[static_cast<int>(outcome)];
  };
  ASSERT_TRUE(client->Put("k", "v").ok());
  ASSERT_TRUE(client->Get("k").ok());
  EXPECT_TRUE(absl::IsNotFound(client->Get("absent").status()));
  EXPECT_TRUE(absl::IsAlreadyExists(client->Insert("k", "w")));
  EXPECT_TRUE(client->Delete("k").ok());
  EXPECT_TRUE(absl::IsNotFound(client->Delete("k")));
  EXPECT_TRUE(absl::IsInvalidArgument(client->Put("", "v")));
  EXPECT_EQ(count(OpType::kPut, OpOutcome::kOk), 1u);
  EXPECT_EQ(count(OpType::kPut, OpOutcome::kFailed), 1u);
  EXPECT_EQ(count(OpType::kGet, OpOutcome::kOk), 1u);
  EXPECT_EQ(count(OpType::kGet, OpOutcome::kNotFound), 1u);
  EXPECT_EQ(count(OpType::kInsert, OpOutcome::kAlreadyExists), 1u);
  EXPECT_EQ(count(OpType::kDelete, OpOutcome::kOk), 1u);
  EXPECT_EQ(count(OpType::kDelete, OpOutcome::kNotFound), 1u);

  servers_["s2"]->Kill(SIGKILL);
  ASSERT_TRUE(WaitForMap(
      [](const proto::ClusterMap& m) { return CountState(m, proto::SERVER_STATE_DOWN) == 1; }));
  const OpStats before = client->stats(OpType::kGet);
  constexpr int kGets = 60;
  uint64_t unavailable = 0;
  for (int i = 0; i < kGets; ++i) {
    unavailable += absl::IsUnavailable(client->Get(absl::StrCat("k", i)).status());
  }
  ASSERT_GT(unavailable, 0u);  // About a third of the keys were s2's.
  const OpStats after = client->stats(OpType::kGet);
  const int u = static_cast<int>(OpOutcome::kUnavailable);
  const int miss = static_cast<int>(OpOutcome::kNotFound);
  EXPECT_EQ(after.outcomes[u] - before.outcomes[u], unavailable);
  EXPECT_EQ(after.outcomes[miss] - before.outcomes[miss], kGets - unavailable);
  uint64_t bucketed = 0;
  for (int i = 0; i < kLatencyBuckets; ++i) {
    bucketed += after.latency_buckets[i] - before.latency_buckets[i];
  }
  EXPECT_EQ(bucketed, uint64_t{kGets});
  EXPECT_GT(after.latency_sum, before.latency_sum);
}

TEST_F(ClusterTest, ClientsOutliveTheCoordinator) {
  StartThree();
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Put("before", "1").ok());
  const uint64_t epoch = Map().epoch();
  coordinator_->Kill(SIGKILL);
  // The data path does not need the coordinator.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(client->Put(absl::StrCat("during", i), "2").ok());
    ASSERT_EQ(*client->Get(absl::StrCat("during", i)), "2");
  }
  EXPECT_EQ(*client->Get("before"), "1");
  // A new coordinator on the same address learns the cluster again.
  const int port = port_;
  port_ = 0;
  StartCoordinator(port);
  ASSERT_TRUE(WaitForMap([](const proto::ClusterMap& m) {
    return CountState(m, proto::SERVER_STATE_UP) == 3;
  })) << "the servers did not register with the new coordinator";
  EXPECT_GT(epoch, 0u);
  EXPECT_EQ(*client->Get("during7"), "2");
  auto fresh = OpenClient();
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(*fresh->Get("during42"), "2");
}

// Every operation completes exactly once, even when the map changes under
// it: here a server is killed and restarted from its region file (a new
// generation and rkey) three times while 32 Puts stay in flight.
TEST_F(ClusterTest, EveryOperationCompletesOnceWhileServersRestart) {
  StartThree();
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  uint64_t issued = 0;
  std::vector<int> calls;  // Per issued operation.
  auto issue = [&] {
    const uint64_t id = issued++;
    calls.push_back(0);
    client->PutAsync(absl::StrCat("k", id % 500), "v", [&calls, id](absl::Status) { calls[id]++; });
  };
  auto run_for = [&](absl::Duration d) {
    const absl::Time end = absl::Now() + d;
    while (absl::Now() < end) {
      while (client->in_flight() < 32) issue();
      client->Poll(absl::Milliseconds(1));
    }
  };
  run_for(absl::Milliseconds(300));
  for (int restart = 0; restart < 3; ++restart) {
    const uint64_t generation = [&] {
      const proto::ClusterMap map = Map();
      for (const auto& s : map.servers()) {
        if (s.id() == "s2") return s.region().generation();
      }
      return uint64_t{0};
    }();
    servers_["s2"]->Kill(SIGKILL);
    StartServer("s2");
    // Load goes on until the map has s2's new region, and a while after.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    bool back = false;
    while (!back && absl::Now() < deadline) {
      run_for(absl::Milliseconds(50));
      const proto::ClusterMap map = Map();
      for (const auto& s : map.servers()) {
        back |= s.id() == "s2" && s.state() == proto::SERVER_STATE_UP &&
                s.region().generation() != generation;
      }
    }
    ASSERT_TRUE(back) << "s2 did not come back";
    run_for(absl::Milliseconds(300));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (client->in_flight() > 0 && absl::Now() < deadline) client->Poll(absl::Milliseconds(10));
  EXPECT_EQ(client->in_flight(), 0u);
  int never = 0, twice = 0;
  for (int c : calls) {
    never += c == 0;
    twice += c > 1;
  }
  EXPECT_EQ(never, 0) << "of " << issued << " operations, " << never << " never completed";
  EXPECT_EQ(twice, 0) << "of " << issued << " operations, " << twice << " completed twice";
}

// A restarted coordinator (with its state file) goes on from the map it
// had; clients must follow it, or a server that moved meanwhile stays
// unreachable for them.
TEST_F(ClusterTest, ClientsFollowARestartedCoordinator) {
  StartThree();
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  constexpr int kKeys = 120;
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(client->Put(absl::StrCat("k", i), "v").ok());
  // Map changes, so that the first coordinator's epoch is well ahead of
  // where a new one starts.
  for (int restart = 0; restart < 5; ++restart) {
    RestartServer("s3");
    (void)client->Get("k1");  // The client takes each new map.
  }
  coordinator_->Kill(SIGKILL);
  const int port = port_;
  port_ = 0;
  StartCoordinator(port);
  ASSERT_TRUE(WaitForMap(
      [](const proto::ClusterMap& m) { return CountState(m, proto::SERVER_STATE_UP) == 3; }));
  // s2 comes back on another port (it listens on port 0).
  RestartServer("s2");
  // Within a few seconds the running client reads every key again.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  int failing = kKeys;
  while (failing > 0 && absl::Now() < deadline) {
    failing = 0;
    for (int i = 0; i < kKeys; ++i) failing += !client->Get(absl::StrCat("k", i)).ok();
  }
  EXPECT_EQ(failing, 0) << "keys still unreachable through the running client";
}

// An INSERT or DELETE that may have executed is never retried: a retry
// would answer AlreadyExists or NotFound for its own first attempt. With
// requests failing at random (executed or not), a fresh key's INSERT is OK
// or Unavailable, and an existing key's DELETE OK or Unavailable.
TEST_F(ClusterTest, InsertAndDeleteAnswerNothingWrongWhenRequestsFail) {
  StartThree();
  client_internal::OpenOptions o;
  o.cluster_token = kToken;
  o.scratch_bytes = 4 << 20;
  o.fabric = fabric::InjectFaults(*fabric::OpenFabric({.kind = fabric::FabricKind::kSoft}),
                                  {.seed = 11, .fail_probability = 0.05});
  auto flaky = client_internal::OpenCluster(address_, o);
  ASSERT_TRUE(flaky.ok()) << flaky.status();
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  constexpr int kKeys = 400;
  int wrong = 0, unavailable = 0;
  for (int i = 0; i < kKeys; ++i) {
    absl::Status s = (*flaky)->Insert(absl::StrCat("fresh", i), "v");
    if (absl::IsUnavailable(s)) {
      unavailable++;
    } else if (!s.ok()) {
      wrong++;
      ADD_FAILURE() << "insert of fresh" << i << ": " << s;
    }
  }
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(client->Put(absl::StrCat("old", i), "v").ok());
  for (int i = 0; i < kKeys; ++i) {
    absl::Status s = (*flaky)->Delete(absl::StrCat("old", i));
    if (absl::IsUnavailable(s)) {
      unavailable++;
    } else if (!s.ok()) {
      wrong++;
      ADD_FAILURE() << "delete of old" << i << ": " << s;
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(unavailable, 0) << "no request failed: the test tested nothing";
}

TEST_F(ClusterTest, UnauthenticatedAndMalformedCallsAreRejected) {
  StartServer("s1");
  ASSERT_TRUE(WaitForMap(
      [](const proto::ClusterMap& m) { return CountState(m, proto::SERVER_STATE_UP) == 1; }));
  // No token, wrong token.
  for (const std::string& token : {std::string(), std::string("wrong")}) {
    CoordinatorStub stub(address_, token);
    proto::ClusterMap map;
    absl::Status s = stub.GetClusterMap(&map);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  }
  // Malformed registrations.
  CoordinatorStub stub(address_, kToken);
  auto register_with = [&](proto::RegisterRequest req) {
    grpc::ClientContext ctx;
    stub.Prepare(&ctx, absl::Seconds(2));
    proto::RegisterResponse resp;
    return stub.stub().Register(&ctx, req, &resp).error_code();
  };
  proto::RegisterRequest good;
  good.set_id("sX");
  good.mutable_region()->mutable_endpoint()->set_kind("soft");
  good.mutable_region()->mutable_endpoint()->set_address("127.0.0.1:9");
  good.mutable_region()->set_base_address(4096);
  good.mutable_region()->set_length(1 << 20);
  good.mutable_region()->set_generation(1);
  proto::RegisterRequest bad = good;
  bad.set_id("");
  EXPECT_EQ(register_with(bad), grpc::StatusCode::INVALID_ARGUMENT);
  bad = good;
  bad.set_id("has space");
  EXPECT_EQ(register_with(bad), grpc::StatusCode::INVALID_ARGUMENT);
  bad = good;
  bad.mutable_region()->mutable_endpoint()->set_kind("carrier-pigeon");
  EXPECT_EQ(register_with(bad), grpc::StatusCode::INVALID_ARGUMENT);
  bad = good;
  bad.mutable_region()->mutable_endpoint()->set_address("nowhere");
  EXPECT_EQ(register_with(bad), grpc::StatusCode::INVALID_ARGUMENT);
  bad = good;
  bad.mutable_region()->set_length(0);
  EXPECT_EQ(register_with(bad), grpc::StatusCode::INVALID_ARGUMENT);
  // The soft fabric refuses a queue pair without the token.
  const proto::ClusterMap map = Map();
  ASSERT_EQ(map.servers_size(), 1);
  const proto::ServerInfo& s1 = map.servers(0);
  auto f = fabric::OpenFabric({.kind = fabric::FabricKind::kSoft});
  ASSERT_TRUE(f.ok());
  auto qp = (*f)->Connect({s1.region().endpoint().address(), "wrong"});
  EXPECT_TRUE(absl::IsPermissionDenied(qp.status())) << qp.status();
  // And the cluster still works.
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Put("k", "v").ok());
}

TEST_F(ClusterTest, ForeignOrCorruptRegionFilesAreRefused) {
  const std::string path = dir_ + "/bad.region";
  auto run = [&](const std::string& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    const std::string cmd =
        absl::StrCat(RKV_KVSERVER, " --id=bad --coordinator=", address_, " --token=", kToken,
                     " --fabric=soft --memory=16MiB --region_file=", path, " 2>&1");
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof(buf), p)) out += buf;
    const int rc = pclose(p);
    return std::make_pair(rc, out);
  };
  auto [rc1, out1] = run("short");
  EXPECT_NE(rc1, 0);
  EXPECT_NE(out1.find("refusing region file"), std::string::npos) << out1;
  auto [rc2, out2] = run(std::string(16 << 20, 'x'));
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("not an rkv region"), std::string::npos) << out2;
}

class ReplicatedClusterTest : public ClusterTest {
 protected:
  int Replicas() const override { return 2; }

  // The group's state in the map: serving, with `copying` being copied in.
  static bool Copying(const proto::ClusterMap& m, const std::string& spare) {
    return m.groups_size() == 1 && m.groups(0).state() == proto::GROUP_STATE_SERVING &&
           m.groups(0).copying_size() == 1 && m.groups(0).copying(0) == spare;
  }
};

// A server lost with its disk comes back blank: its group serves on the
// survivor, which copies its region to the returning server while clients
// keep reading and writing, and the copy joins at the end with every write.
TEST_F(ReplicatedClusterTest, ClientsKeepWorkingWhileASpareIsCopiedIn) {
  // 32 MiB at 8 MiB/s: the live copy lasts four seconds at least.
  server_flags_ = {"--copy_rate=8MiB"};
  StartServers(2);
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  constexpr int kKeys = 100;
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(client->Put(absl::StrCat("k", i), "v0").ok());

  const std::string lost = Map().groups(0).members(1);
  RestartServer(lost, /*lose_region=*/true);
  ASSERT_TRUE(WaitForMap([&](const proto::ClusterMap& m) { return Copying(m, lost); }))
      << "the returning server is not copied in while the group serves: "
      << Map().ShortDebugString();

  // Rounds of writes and reads; a round counts when the map showed the
  // copy under way both before and after it.
  int rounds_during_copy = 0;
  for (int round = 1; round <= 400; ++round) {
    const bool before = Copying(Map(), lost);
    for (int i = 0; i < kKeys; i += 10) {
      const std::string key = absl::StrCat("k", i), value = absl::StrCat("v", round);
      ASSERT_TRUE(client->Put(key, value).ok()) << "round " << round;
      absl::StatusOr<std::string> got = client->Get(key);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(*got, value);
    }
    if (!before || !Copying(Map(), lost)) {
      if (rounds_during_copy > 0) break;
      continue;
    }
    rounds_during_copy++;
  }
  EXPECT_GT(rounds_during_copy, 0) << "no operation ran during the copy";

  // The copy joins: two copies again, and every write is in the group.
  ASSERT_TRUE(WaitForGroups(1));
  const proto::ClusterMap map = Map();
  ASSERT_EQ(map.groups(0).members_size(), 2);
  EXPECT_EQ(map.groups(0).members(1), lost);
  for (int i = 0; i < kKeys; ++i) {
    absl::StatusOr<std::string> got = client->Get(absl::StrCat("k", i));
    ASSERT_TRUE(got.ok()) << got.status();
    if (i % 10 != 0) {
      EXPECT_EQ(*got, "v0");
    }
  }
  // ... on both copies: the survivor is lost in turn, and the copied-in
  // server serves every key alone.
  std::map<std::string, std::string> expected;
  for (int i = 0; i < kKeys; ++i)
    expected[absl::StrCat("k", i)] = *client->Get(absl::StrCat("k", i));
  const std::string survivor = map.groups(0).members(0);
  servers_[survivor]->Kill(SIGKILL);
  ASSERT_TRUE(WaitForMap([&](const proto::ClusterMap& m) {
    return m.groups_size() == 1 && m.groups(0).state() == proto::GROUP_STATE_SERVING &&
           m.groups(0).members_size() == 1 && m.groups(0).members(0) == lost;
  })) << Map().ShortDebugString();
  for (const auto& [key, value] : expected) {
    absl::StatusOr<std::string> got = client->Get(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    EXPECT_EQ(*got, value) << key;
  }
}

// What kvctl status shows for each server (its figures in the map) is
// right soon after each way its region changes under it: a restart from
// its region file, then the reconfiguration that settles the copies and
// pushes what differs; a server back blank, copied into while the group
// serves. Soon: within two seconds of the group serving again (three
// leases under a sanitizer's longer lease), not at the next periodic count
// (every 5 s).
TEST_F(ReplicatedClusterTest, EveryServersFiguresAreRightSoonAfterItsRegionChanges) {
  StartServers(2);
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  constexpr uint64_t kKeys = 300;
  for (uint64_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(client->Put(absl::StrCat("k", i), std::string(500, 'v')).ok()) << i;
  }
  // Every member counts every record, and the same live heap: the copies
  // hold the same blocks.
  const auto right = [&](const proto::ClusterMap& m) {
    if (m.groups_size() != 1 || m.groups(0).state() != proto::GROUP_STATE_SERVING ||
        m.groups(0).members_size() != 2) {
      return false;
    }
    uint64_t live = 0;
    for (const std::string& id : m.groups(0).members()) {
      for (const auto& s : m.servers()) {
        if (s.id() != id) continue;
        if (s.stats().slots_used() != kKeys) return false;
        if (live == 0) live = s.stats().heap_live();
        if (s.stats().heap_live() != live) return false;
      }
    }
    return live >= kKeys * 500;
  };
  const auto right_soon = [&]() {
    const absl::Time deadline =
        absl::Now() + std::max(absl::Seconds(2), 3 * absl::Milliseconds(kLeaseMs));
    while (absl::Now() < deadline) {
      if (right(Map())) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  };
  ASSERT_TRUE(WaitForMap(right)) << Map().ShortDebugString();

  const std::string backup = Map().groups(0).members(1);
  RestartServer(backup);
  ASSERT_TRUE(WaitForGroups(1));
  EXPECT_TRUE(right_soon()) << "after a restart and a push: " << Map().ShortDebugString();

  RestartServer(backup, /*lose_region=*/true);
  ASSERT_TRUE(WaitForGroups(1));
  EXPECT_TRUE(right_soon()) << "after a live copy: " << Map().ShortDebugString();
}

// Nothing changes while the coordinator cannot store its state (its state
// file here; etcd without a quorum alike): a server that misses its lease
// is not taken out of its group, for a coordinator leading after this one
// must never find a state older than what servers and clients were told.
// Once the state can be stored, the group reconfigures and serves.
TEST_F(ReplicatedClusterTest, NothingChangesWhileTheStateCannotBeStored) {
  StartServers(2);
  const proto::ClusterMap before = Map();
  const std::string lost = before.groups(0).members(1);
  // A directory where the state file's temporary copy goes: every write
  // of the state file fails from now on.
  const std::string blocker = dir_ + "/coord.state.tmp";
  ASSERT_EQ(mkdir(blocker.c_str(), 0700), 0);
  servers_[lost]->Kill(SIGKILL);
  // Three leases: the coordinator tried to mark it down a dozen times.
  const absl::Time until = absl::Now() + absl::Milliseconds(3 * kLeaseMs);
  while (absl::Now() < until) {
    const proto::ClusterMap m = Map();
    ASSERT_EQ(m.epoch(), before.epoch()) << "the map changed: " << m.ShortDebugString();
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(rmdir(blocker.c_str()), 0);
  ASSERT_TRUE(WaitForMap([&](const proto::ClusterMap& m) {
    return m.groups_size() == 1 && m.groups(0).state() == proto::GROUP_STATE_SERVING &&
           m.groups(0).config() > before.groups(0).config() && m.groups(0).members_size() == 1;
  })) << Map().ShortDebugString();
}

}  // namespace
}  // namespace rkv
