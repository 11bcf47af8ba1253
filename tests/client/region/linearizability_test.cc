// Concurrent clients, checked for linearizability: on the deterministic
// fabric over many seeds, and over TCP with real threads. The test hooks
// that break the protocol must be caught, or the checker proves nothing.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/session/broken_protocol.h"
#include "common/fabric/faulty_fabric.h"
#include "common/layout/region_format.h"
#include "common/random.h"
#include "gtest/gtest.h"
#include "tests/client/region/kv_test_env.h"
#include "tests/common/fabric/verbs_test_setup.h"
#include "tests/linearizability/checker.h"
#include "tests/linearizability/random_ops.h"

namespace rkv::testing {
namespace {

namespace lin = ::rkv::linearizability;

struct Workload {
  int clients = 4;
  int ops_per_client = 40;
  int outstanding = 2;  // Per client.
  int replicas = 1;     // Copies of the region (mirrored; the first is the primary).
  // Replicated: half way through, every client is closed (its operations
  // in flight fail), the primary is lost with its memory, a backup takes
  // over, and the clients open again on the copies left.
  bool failover = false;
  // Client 0 is paused half way through (it neither polls nor sees time
  // pass) until its lease has lapsed and every copy fenced it — and with
  // one copy, until a census round handed what it held to the free pool
  // — then resumes: as a process stopped, or in a long collection pause.
  // Its clock then jumps, or stood still with it (it posts before it
  // learns of the lapse).
  bool pause = false;
  lin::OpMix mix;
};

// The client lease in the simulation's microseconds (kvserver's default is
// seconds): a few thousand steps of work.
constexpr absl::Duration kSimLease = absl::Microseconds(2000);

using lin::IssueRandom;
using lin::OutcomeOf;

// Runs the workload on the deterministic fabric; one thread drives every
// client, so the seed fixes the whole history.
std::vector<lin::Operation> RunSimulated(uint64_t seed, const Workload& w,
                                         const client_internal::BrokenProtocol& broken = {},
                                         const fabric::FaultOptions& faults = {}) {
  auto env = KvTestEnv::Create(KvBackend::kSoftSim,
                               {.region_bytes = 4 << 20,
                                .index_share = 0.25,
                                .client_lease = kSimLease,
                                .session_slots = 16},
                               seed, w.replicas);
  EXPECT_TRUE(env.ok()) << env.status();
  // Time: the network's steps, and a tick per spin of the loop below, so
  // that leases run out while the clients left are idle. A client's clock
  // also ticks as it polls, never behind the servers'.
  auto world = std::make_shared<int64_t>(0);
  const auto server_now = [&] {
    return absl::UnixEpoch() + absl::Microseconds((*env)->sim->steps() + *world);
  };
  struct PausableClock {
    int64_t ticks = 0;
    int64_t frozen = -1;  // While paused: the time it shows.
    int64_t behind = 0;   // What a clock that stood still lags.
  };
  std::vector<std::shared_ptr<PausableClock>> clocks;
  std::vector<std::unique_ptr<Client>> clients;
  auto open_clients = [&] {
    for (int c = 0; c < w.clients; ++c) {
      client_internal::OpenOptions o = (*env)->client_options();
      fabric::FaultOptions f = faults;
      f.seed = seed * 31 + c;
      // Delays in simulated time, which also ticks as the client polls, so
      // that held requests come due when nothing else runs.
      auto clock = [net = (*env)->sim, ticks = std::make_shared<int64_t>(0)] {
        return absl::UnixEpoch() + absl::Microseconds(net->steps() + (*ticks)++);
      };
      auto pc = std::make_shared<PausableClock>();
      clocks.push_back(pc);
      if (w.pause) {
        o.clock = [net = (*env)->sim, world, pc] {
          const int64_t us =
              pc->frozen >= 0 ? pc->frozen : net->steps() + *world + pc->ticks++ - pc->behind;
          return absl::UnixEpoch() + absl::Microseconds(us);
        };
      }
      const auto open = [&] {
        if (faults.any()) o.fabric = fabric::InjectFaults((*env)->sim->NewFabric(), f, clock);
        return (*env)->NewClient(o, broken);
      };
      // Opening reads the region header, which a fault may fail too.
      auto client = open();
      for (int attempt = 0; !client.ok() && faults.any() && attempt < 20; ++attempt) {
        f.seed += 1000;  // Same seed, same fault: draw another.
        client = open();
      }
      EXPECT_TRUE(client.ok()) << client.status();
      clients.push_back(std::move(client).value());
    }
  };
  open_clients();
  Rng rng(seed);
  lin::HistoryRecorder rec;
  std::vector<int> issued(w.clients, 0), outstanding(w.clients, 0);
  bool failed_over = !w.failover;
  std::vector<server::RegionServer*> copies = {(*env)->server.get()};
  for (auto& b : (*env)->backups) copies.push_back(b.get());
  std::vector<bool> fenced_by(copies.size(), false);  // Copies that fenced someone.
  const auto fenced = [&] { return size_t(std::count(fenced_by.begin(), fenced_by.end(), true)); };
  enum class Pause { kNotYet, kPaused, kDone } pause = w.pause ? Pause::kNotYet : Pause::kDone;
  const bool clock_stood_still = seed % 2 == 0;
  absl::Time last_check = absl::InfinitePast();
  for (int spins = 0; spins < 1'000'000; ++spins) {
    // The servers check every eighth of a lease, as kvserver's thread does.
    if (w.pause && server_now() - last_check >= kSimLease / 8) {
      last_check = server_now();
      for (size_t i = 0; i < copies.size(); ++i) {
        if (!copies[i]->CheckLeases(last_check).empty()) fenced_by[i] = true;
      }
    }
    *world += 5;
    if (pause == Pause::kNotYet && issued[0] >= w.ops_per_client / 2) {
      pause = Pause::kPaused;
      clocks[0]->frozen = absl::ToUnixMicros(server_now());
    } else if (pause == Pause::kPaused && fenced() == copies.size() &&
               copies[0]->Stats().heap_reclaimed > 0) {
      pause = Pause::kDone;
      if (clock_stood_still)
        clocks[0]->behind = absl::ToUnixMicros(server_now()) - clocks[0]->frozen;
      clocks[0]->frozen = -1;
    }
    if (!failed_over && issued[0] >= w.ops_per_client / 2) {
      failed_over = true;
      clients.clear();  // What they had in flight fails, with unknown outcome.
      (*env)->sim->RunUntilIdle();
      EXPECT_TRUE((*env)->FailOver().ok());
      open_clients();
    }
    bool busy = pause == Pause::kPaused;
    for (int c = 0; c < w.clients; ++c) {
      if (c == 0 && pause == Pause::kPaused) continue;
      while (outstanding[c] < w.outstanding && issued[c] < w.ops_per_client) {
        IssueRandom(*clients[c], c, issued[c]++, rng, w.mix, rec, outstanding[c]);
      }
      clients[c]->Poll(absl::ZeroDuration());
      busy |= outstanding[c] > 0 || issued[c] < w.ops_per_client;
    }
    if (!busy) break;
  }
  std::vector<lin::Operation> history = rec.history();
  // Before the recorder goes: a run cut short fails what is in flight.
  clients.clear();
  return history;
}

TEST(LinearizabilityTest, CheckerAcceptsAndRejectsKnownHistories) {
  using lin::OpKind;
  using lin::Outcome;
  // put a || get -> a, then get -> a: fine.
  std::vector<lin::Operation> good = {
      {OpKind::kPut, "k", "a", Outcome::kOk, 1, 4},
      {OpKind::kGet, "k", "a", Outcome::kOk, 2, 3},
      {OpKind::kGet, "k", "a", Outcome::kOk, 5, 6},
  };
  EXPECT_TRUE(lin::Check(good).linearizable);
  // A stale read after the write completed.
  std::vector<lin::Operation> stale = {
      {OpKind::kPut, "k", "a", Outcome::kOk, 1, 2},
      {OpKind::kGet, "k", "", Outcome::kNotFound, 3, 4},
  };
  EXPECT_FALSE(lin::Check(stale).linearizable);
  // Two inserts of one key both succeeding, with no delete between.
  std::vector<lin::Operation> twice = {
      {OpKind::kInsert, "k", "a", Outcome::kOk, 1, 4},
      {OpKind::kInsert, "k", "b", Outcome::kOk, 2, 3},
  };
  EXPECT_FALSE(lin::Check(twice).linearizable);
  // A value nobody wrote.
  std::vector<lin::Operation> invented = {
      {OpKind::kPut, "k", "a", Outcome::kOk, 1, 2},
      {OpKind::kGet, "k", "ab", Outcome::kOk, 3, 4},
  };
  EXPECT_FALSE(lin::Check(invented).linearizable);
  // An operation that failed may or may not have taken effect.
  std::vector<lin::Operation> unknown = {
      {OpKind::kPut, "k", "a", Outcome::kUnknown, 1, 2},
      {OpKind::kGet, "k", "a", Outcome::kOk, 3, 4},
      {OpKind::kGet, "j", "", Outcome::kNotFound, 3, 4},
  };
  EXPECT_TRUE(lin::Check(unknown).linearizable);
}

// Seeds explored per test: 1..N (RKV_LIN_SEEDS=N overrides N, for longer
// runs), then the seeds that once found a bug; RKV_LIN_SEED=S runs seed S
// alone (a replay).
std::vector<uint64_t> Seeds(uint64_t quick, std::vector<uint64_t> found_bugs) {
  if (const char* one = std::getenv("RKV_LIN_SEED")) return {std::strtoull(one, nullptr, 10)};
  const char* env = std::getenv("RKV_LIN_SEEDS");
  const uint64_t n = env ? std::strtoull(env, nullptr, 10) : quick;
  std::vector<uint64_t> seeds = std::move(found_bugs);
  for (uint64_t s = 1; s <= n; ++s) seeds.push_back(s);
  return seeds;
}

// One search over seeds, each a workload shaped by its seed: more clients,
// fewer keys, deeper queues; at most 8 operations in flight, which the
// checker searches exhaustively in well under a second.
struct Search {
  uint64_t quick_seeds = 150;
  std::vector<uint64_t> found_bugs;  // Seeds that once found a bug.
  int total_ops = 120;               // Per seed, over all clients.
  bool replicated = false;           // 2 or 3 copies, by seed.
  bool failover = false;             // Workload::failover.
  bool pause = false;                // Workload::pause.
  fabric::FaultOptions faults;       // None: every operation must succeed.
};

void CheckSeeds(const Search& search) {
  const bool may_fail = search.faults.any() || search.failover || search.pause;
  int ops = 0, failed = 0, inconclusive = 0;
  const std::vector<uint64_t> seeds = Seeds(search.quick_seeds, search.found_bugs);
  for (uint64_t seed : seeds) {
    Workload w;
    w.replicas = search.replicated ? 2 + (seed / 2) % 2 : 1;
    w.failover = search.failover;
    w.pause = search.pause;
    w.clients = 2 + seed % 3;
    w.mix.keys = 1 + seed % 3;
    w.outstanding = 1 + seed % 2;
    w.ops_per_client = search.total_ops / w.clients;
    std::vector<lin::Operation> history = RunSimulated(seed, w, {}, search.faults);
    ASSERT_EQ(history.size(), size_t(w.clients * w.ops_per_client)) << "seed " << seed;
    for (const lin::Operation& op : history) {
      ASSERT_TRUE(may_fail || op.outcome != lin::Outcome::kUnknown)
          << "seed " << seed << ": an operation failed";
      failed += op.outcome == lin::Outcome::kUnknown;
    }
    lin::CheckResult r = lin::Check(history);
    // Many operations of unknown outcome on one key can exhaust the search:
    // such a seed proves nothing either way, and must stay rare.
    if (r.gave_up && may_fail) {
      ++inconclusive;
      continue;
    }
    ASSERT_TRUE(r.linearizable) << "seed " << seed << " (replay: RKV_LIN_SEED=" << seed << ")\n"
                                << lin::ShortestFailingPrefix(history);
    ops += history.size();
  }
  if (may_fail) {
    EXPECT_GT(failed, 0) << "nothing failed any operation: the test checks nothing extra";
    EXPECT_LE(inconclusive * 100, static_cast<int>(seeds.size()))
        << "over 1 % of seeds inconclusive";
  }
  ::testing::Test::RecordProperty("operations_checked", ops);
  std::cout << ops << " operations checked linearizable, " << failed << " failed, " << inconclusive
            << " seeds inconclusive\n";
}

// Requests delayed, failed with unknown outcome (perhaps executed at the
// target), connections dropped.
fabric::FaultOptions SomeFaults() {
  fabric::FaultOptions faults;
  faults.delay_probability = 0.05;
  faults.max_delay = absl::Microseconds(300);
  faults.fail_probability = 0.01;
  faults.drop_probability = 0.002;
  return faults;
}

TEST(LinearizabilityTest, ConcurrentClientsOnTheDeterministicFabric) {
  // 12975: a claim withdrawn and made again in the same slot with the same
  // block let a rival's stale commit take it (two committed slots).
  CheckSeeds({.found_bugs = {12975}});
}

// The same under injected faults. An operation that fails may or may not
// have taken effect, and the checker allows both; everything that
// succeeded must still be linearizable.
TEST(LinearizabilityTest, ConcurrentClientsUnderFaultsOnTheDeterministicFabric) {
  // 3857: two slots naming one block shifted a GET's block reads, and it
  // returned another write's value.
  CheckSeeds({.quick_seeds = 100, .found_bugs = {3857}, .total_ops = 100, .faults = SomeFaults()});
}

// A region in 2 or 3 mirrored copies: writes go to the primary as intents,
// are copied to the backups and then committed; readers and writers that
// find an intent finish it first.
TEST(LinearizabilityTest, ConcurrentClientsOnReplicatedRegions) {
  CheckSeeds({.replicated = true});
}

// The same under faults: an operation that fails may leave its intent
// half copied, for the next operation on the key to finish.
TEST(LinearizabilityTest, ConcurrentClientsOnReplicatedRegionsUnderFaults) {
  CheckSeeds({.quick_seeds = 100, .total_ops = 100, .replicated = true, .faults = SomeFaults()});
}

// Losing the primary with its memory half way through, with 2 or 3 copies
// (the takeover: server/kvserver/replica_takeover.h): every write acknowledged
// before is still there, a read that saw a write sees it or later after,
// and what failed may have taken effect or not.
TEST(LinearizabilityTest, ReplicatedRegionsSurviveLosingThePrimary) {
  // 504: found a build that acknowledged a write before every copy held it.
  CheckSeeds({.found_bugs = {504}, .replicated = true, .failover = true});
}

// The same with faults before and after: failed writes leave intents and
// tentative words behind, which the takeover settles one way or the other.
TEST(LinearizabilityTest, ReplicatedRegionsSurviveLosingThePrimaryUnderFaults) {
  // 40: a write's word was cached as soon as its commit was posted; a
  // delete from the same client sent a tentative CAS from it that landed on
  // a backup before the commit did, a finisher of the write's intent copied
  // over it unseen, and the deleted value came back at the takeover.
  // 995: a write retried with the same block after its intent lost, and a
  // late copy that expected its first, tentative word undid the second.
  CheckSeeds({.quick_seeds = 100,
              .found_bugs = {40, 995},
              .replicated = true,
              .failover = true,
              .faults = SomeFaults()});
}

// A client paused past its lease (SIGSTOP, a long collection, a stalled
// VM) is fenced on every copy, and its heap reclaimed by the primary;
// resumed, what it had in flight and what it posts before it learns so
// fail with unknown outcome — none of its requests executes any more — and
// it goes on as a new session, with none of the heap it held. With 1 to 3
// copies, 1,000 seeds.
TEST(LinearizabilityTest, ClientsPausedPastTheirLeaseAreFencedAndResume) {
  // Under a sanitizer (RKV_SIM_SEEDS, as the cluster simulation takes it;
  // empty is unset), a sample.
  const char* sample = std::getenv("RKV_SIM_SEEDS");
  const uint64_t seeds =
      sample != nullptr && *sample != '\0' ? std::strtoull(sample, nullptr, 10) / 2 : 500;
  ASSERT_GT(seeds, 0u) << "RKV_SIM_SEEDS must be 2 or more";
  for (const bool replicated : {false, true}) {
    CheckSeeds({.quick_seeds = seeds, .replicated = replicated, .pause = true});
  }
}

TEST(LinearizabilityTest, SameSeedSameHistory) {
  const Workload w;
  std::vector<lin::Operation> a = RunSimulated(42, w), b = RunSimulated(42, w);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].value, b[i].value) << i;
    EXPECT_EQ(a[i].outcome, b[i].outcome) << i;
    EXPECT_EQ(a[i].response, b[i].response) << i;
  }
}

TEST(LinearizabilityTest, CheckerCatchesInsertsWithoutConflictResolution) {
  // Racing inserts and deletes of two keys; without settling concurrent
  // claims, two inserts of one key can both succeed.
  Workload w;
  w.mix.keys = 2;
  w.mix.weights[0] = 2;
  w.mix.weights[1] = 0;
  w.mix.weights[2] = 5;
  w.mix.weights[3] = 3;
  client_internal::BrokenProtocol broken;
  broken.skip_conflict_resolution = true;
  int caught = 0;
  for (uint64_t seed = 1; seed <= 150 && caught == 0; ++seed) {
    if (!lin::Check(RunSimulated(seed, w, broken)).linearizable) caught++;
  }
  EXPECT_GT(caught, 0) << "the checker never noticed duplicate inserts";
  // The real protocol passes the same workload.
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    lin::CheckResult r = lin::Check(RunSimulated(seed, w));
    ASSERT_TRUE(r.linearizable) << "seed " << seed << "\n" << r.explanation;
  }
}

// A rogue queue pair rewrites a live block in place while clients read it,
// as a block reused too early would be. Readers must never return a torn
// value; without checksum verification they do, and the checker says so.
lin::CheckResult RunTornBlockRace(uint64_t seed, bool skip_checksum) {
  auto env = KvTestEnv::Create(KvBackend::kSoftSim, {.region_bytes = 1 << 20}, seed);
  EXPECT_TRUE(env.ok());
  client_internal::OpenOptions o = (*env)->client_options();
  o.cache_entries = 0;
  const client_internal::BrokenProtocol broken{.skip_block_checksum = skip_checksum};
  auto writer = client_internal::OpenBroken((*env)->server->address(), o, broken);
  auto reader = client_internal::OpenBroken((*env)->server->address(), o, broken);
  EXPECT_TRUE(writer.ok() && reader.ok());
  lin::HistoryRecorder rec;
  const std::string v1(1000, 'a'), v2(1000, 'b');
  size_t id = rec.Invoke(lin::OpKind::kPut, "k", v1, 0);
  EXPECT_TRUE((*writer)->Put("k", v1).ok());
  rec.Respond(id, lin::Outcome::kOk);

  // Find the block through the index, as any peer could.
  std::unique_ptr<fabric::Fabric> rogue_fabric = (*env)->sim->NewFabric();
  std::vector<uint8_t> mem(1 << 20);
  auto local = rogue_fabric->RegisterMemory(mem.data(), mem.size(), fabric::kLocalWrite);
  const fabric::RemoteRegion region = (*env)->server->address();
  auto qp = rogue_fabric->Connect(region.endpoint);
  EXPECT_TRUE(qp.ok());
  fabric::Completion c;
  EXPECT_TRUE((*qp)
                  ->Post({fabric::WorkRequest::Read(1, mem.data(), region.length, (*local)->lkey(),
                                                    region.base, region.rkey)})
                  .ok());
  (*qp)->Wait({&c, 1}, absl::Seconds(10));
  const layout::Layout& l = (*env)->server->layout();
  const layout::KeyPlacement p = layout::PlaceKey("k", l.groups);
  uint64_t block = 0;
  for (int b = 0; b < 2 && block == 0; ++b) {
    const uint64_t cb = layout::CombinedBucketOffset(l, p.group[b], p.side[b]);
    for (uint32_t i = 0; i < layout::kSlotsPerCombinedBucket; ++i) {
      uint64_t word;
      std::memcpy(&word, mem.data() + layout::SlotOffset(cb, i), 8);
      if (word != 0 && layout::Slot::Decode(word).fingerprint == p.fingerprint) {
        block = layout::Slot::Decode(word).offset;
      }
    }
  }
  EXPECT_NE(block, 0u);
  std::string encoded;
  layout::EncodeBlock("k", v2, &encoded);
  std::memcpy(mem.data(), encoded.data(), encoded.size());

  // The rewrite, modelled as a put of v2 over its whole duration, races
  // with a stream of reads.
  id = rec.Invoke(lin::OpKind::kPut, "k", v2, 1);
  EXPECT_TRUE(
      (*qp)
          ->Post({fabric::WorkRequest::Write(2, mem.data(), static_cast<uint32_t>(encoded.size()),
                                             (*local)->lkey(), region.base + block, region.rkey)})
          .ok());
  bool rewrite_done = false;
  int reads_after = 0;
  while (reads_after < 2) {
    const size_t get = rec.Invoke(lin::OpKind::kGet, "k", "", 2);
    auto v = (*reader)->Get("k");
    rec.Respond(get, OutcomeOf(v.status()), v.ok() ? *v : "");
    if (!rewrite_done && (*qp)->Poll({&c, 1}) == 1) {
      rewrite_done = true;
      rec.Respond(id, lin::Outcome::kOk);
    }
    if (rewrite_done) reads_after++;
  }
  return lin::Check(rec.history());
}

TEST(LinearizabilityTest, TornBlocksAreNeverReturned) {
  int caught = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    lin::CheckResult r = RunTornBlockRace(seed, /*skip_checksum=*/false);
    ASSERT_TRUE(r.linearizable) << "seed " << seed << "\n" << r.explanation;
    if (!RunTornBlockRace(seed, /*skip_checksum=*/true).linearizable) caught++;
  }
  EXPECT_GT(caught, 0) << "no seed tore a block: the race is not exercised";
}

// Real threads on a real transport: the soft fabric over TCP, and verbs.
class ThreadedLinearizabilityTest : public ::testing::TestWithParam<KvBackend> {};

TEST_P(ThreadedLinearizabilityTest, ConcurrentClientsWithThreads) {
  auto env = KvTestEnv::Create(GetParam(), {.region_bytes = 8 << 20});
  if (!env.ok()) RKV_SKIP_OR_FAIL(env.status());
  constexpr int kThreads = 4;
  Workload w;
  w.mix.keys = 6;
  w.ops_per_client = 300;
  w.outstanding = 4;
  lin::HistoryRecorder rec;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = (*env)->NewClient();
      ASSERT_TRUE(client.ok()) << client.status();
      Rng rng(1000 + t);
      int issued = 0, outstanding = 0;
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      while ((issued < w.ops_per_client || outstanding > 0) && absl::Now() < deadline) {
        while (outstanding < w.outstanding && issued < w.ops_per_client) {
          IssueRandom(**client, t, issued++, rng, w.mix, rec, outstanding);
        }
        (*client)->Poll(absl::Milliseconds(10));
      }
      EXPECT_EQ(outstanding, 0);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<lin::Operation> history = rec.history();
  ASSERT_EQ(history.size(), size_t{kThreads} * w.ops_per_client);
  lin::CheckResult r = lin::Check(history);
  EXPECT_TRUE(r.linearizable) << r.explanation;
}

INSTANTIATE_TEST_SUITE_P(Transports, ThreadedLinearizabilityTest,
                         ::testing::Values(KvBackend::kSoftTcp, KvBackend::kVerbs),
                         [](const auto& info) { return KvBackendName(info.param); });

}  // namespace
}  // namespace rkv::testing
