// The cluster client checked for linearizability while the map changes
// under it: clients on threads of their own keep several operations in
// flight on a small key set while each server in turn is killed with
// SIGKILL and restarted from its region file (a new generation and rkey),
// then leaves (SIGTERM: it deregisters) and rejoins. The history of every
// operation is then checked (tests/linearizability/checker.h), and every
// callback must have run exactly once.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/random.h"
#include "gtest/gtest.h"
#include "rkv/client.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/linearizability/checker.h"

namespace rkv::testing {
namespace {

namespace lin = ::rkv::linearizability;

constexpr int kClients = 4;
constexpr int kDepth = 4;  // Operations in flight per client.
// Few keys, so that clients contend on each and every server holds some.
constexpr int kKeys = 32;
// Weights of get, put, insert, delete.
constexpr int kWeights[4] = {4, 3, 2, 2};
// Operations that must succeed before the first map change, and after each
// one is visible in the coordinator's map before the next: so that each
// change meets a running load, and the clients are seen to recover.
constexpr uint64_t kOkBetweenChanges = 250;
// Operations the clients may issue, all together, from just before a map
// change until it is visible in the coordinator's map, and from then until
// kOkBetweenChanges have succeeded. The load runs at full speed, so without
// these the history, and the checker's work (quadratic in the operations
// on a key), would grow with how long a restart takes on a loaded machine.
constexpr int64_t kOpsPerChange = 5000;
constexpr int64_t kOpsPerPhase = 1500;
// A key whose operation failed is read at most this often by a client
// until a read succeeds: operations on a down server's keys fail at once,
// and a client free to retry them at will spends both cores on it, slowing
// the very restart it waits for.
constexpr absl::Duration kProbeInterval = absl::Milliseconds(10);
// How long the load may take to reach kOkBetweenChanges, and the clients to
// finish what is in flight: far more than either needs.
constexpr absl::Duration kProgressTimeout = absl::Seconds(10);

// One client thread's bookkeeping; touched only by that thread (callbacks
// run inside its Poll) until it has been joined.
struct Worker {
  std::unique_ptr<Client> client;
  uint64_t seed = 0;
  int issued = 0;
  int outstanding = 0;
  std::vector<int> calls;  // Callback runs, per issued operation.
  // Keys this client only reads: set when an operation on the key failed,
  // cleared when a read of it succeeds again. Each write of unknown outcome
  // may take effect at any later time, so the checker's search grows
  // exponentially with their number per key; without this, every write
  // issued while a server is down would be one.
  std::vector<bool> reads_only = std::vector<bool>(kKeys, false);
  // When a read-only key may be read next (kProbeInterval apart).
  std::vector<absl::Time> next_read = std::vector<absl::Time>(kKeys, absl::InfinitePast());
  int stuck = 0;  // In flight when the drain gave up.
  // Failures other than the definite outcomes, by status code.
  std::map<absl::StatusCode, int> failures;
  std::string first_unexpected;  // A failure no operation may answer.
  int unexpected = 0;
};

// The checker's outcome for `kind` answering `s`. A definite outcome the
// operation cannot answer (AlreadyExists for a PUT) is a client bug, noted
// in `w` and recorded as unknown so that the checker is not misled.
lin::Outcome OutcomeOf(lin::OpKind kind, const absl::Status& s, Worker& w) {
  if (s.ok()) return lin::Outcome::kOk;
  const bool not_found_ok = kind == lin::OpKind::kGet || kind == lin::OpKind::kDelete;
  if (absl::IsNotFound(s) && not_found_ok) return lin::Outcome::kNotFound;
  if (absl::IsAlreadyExists(s) && kind == lin::OpKind::kInsert) return lin::Outcome::kAlreadyExists;
  w.failures[s.code()]++;
  // Unavailable: failed on the way, may or may not have taken effect
  // (rkv/client.h). Anything else was not expected of any operation here.
  if (!absl::IsUnavailable(s)) {
    if (w.unexpected++ == 0) w.first_unexpected = s.ToString();
  }
  return lin::Outcome::kUnknown;
}

// A change of the map, made while the load runs (defined below).
enum class Change;

class ClusterLinearizabilityTest : public ClusterFixture {
 protected:
  // Starts `servers` servers and clients on them, makes `changes` one after
  // another under load, then checks the history.
  void RunWithChanges(int servers, const std::vector<std::pair<std::string, Change>>& changes);

  // Issues one random operation on `w`'s client and records it; false,
  // issuing nothing, when it drew a read-only key not to be read yet.
  bool Issue(Worker& w, int id, Rng& rng) {
    const int k = static_cast<int>(rng.Uniform(kKeys));
    int pick = static_cast<int>(rng.Uniform(kWeights[0] + kWeights[1] + kWeights[2] + kWeights[3]));
    int kind = 0;
    while (pick >= kWeights[kind]) pick -= kWeights[kind++];
    if (w.reads_only[k]) {
      const absl::Time now = absl::Now();
      if (now < w.next_read[k]) return false;
      w.next_read[k] = now + kProbeInterval;
      kind = 0;
    }
    const std::string key = absl::StrCat("key", k);
    const int seq = w.issued++;
    // Unique, so that a read names the write it saw.
    const std::string value = absl::StrCat("c", id, "-", seq);
    w.calls.push_back(0);
    w.outstanding++;
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    // Runs once per callback; a second run is counted, not recorded.
    auto complete = [this, &w, seq, k](size_t op, lin::OpKind kind, const absl::Status& s,
                                       std::string read) {
      if (w.calls[seq]++ > 0) return;
      w.outstanding--;
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      const lin::Outcome outcome = OutcomeOf(kind, s, w);
      if (outcome == lin::Outcome::kOk) ok_.fetch_add(1, std::memory_order_relaxed);
      if (outcome == lin::Outcome::kUnknown) {
        w.reads_only[k] = true;
        w.next_read[k] = absl::Now() + kProbeInterval;
      } else if (kind == lin::OpKind::kGet) {
        w.reads_only[k] = false;
      }
      recorder_.Respond(op, outcome, std::move(read));
    };
    switch (kind) {
      case 0: {
        const size_t op = recorder_.Invoke(lin::OpKind::kGet, key, "", id);
        w.client->GetAsync(key, [complete, op](absl::StatusOr<std::string> v) {
          complete(op, lin::OpKind::kGet, v.status(), v.ok() ? *v : "");
        });
        break;
      }
      case 1: {
        const size_t op = recorder_.Invoke(lin::OpKind::kPut, key, value, id);
        w.client->PutAsync(
            key, value, [complete, op](absl::Status s) { complete(op, lin::OpKind::kPut, s, ""); });
        break;
      }
      case 2: {
        const size_t op = recorder_.Invoke(lin::OpKind::kInsert, key, value, id);
        w.client->InsertAsync(key, value, [complete, op](absl::Status s) {
          complete(op, lin::OpKind::kInsert, s, "");
        });
        break;
      }
      default: {
        const size_t op = recorder_.Invoke(lin::OpKind::kDelete, key, "", id);
        w.client->DeleteAsync(
            key, [complete, op](absl::Status s) { complete(op, lin::OpKind::kDelete, s, ""); });
      }
    }
    return true;
  }

  // A client thread: keeps kDepth operations in flight, as the budget
  // allows, until told to stop; then lets those in flight finish.
  void Run(Worker& w, int id, std::stop_token stop) {
    Rng rng(w.seed);
    while (!stop.stop_requested()) {
      bool out_of_budget = false;
      while (w.outstanding < kDepth) {
        if (!TakeBudget()) {
          out_of_budget = true;
          break;
        }
        if (!Issue(w, id, rng)) {
          ReturnBudget();
          break;
        }
      }
      if (w.outstanding > 0) {
        w.client->Poll(absl::Milliseconds(1));
      } else if (out_of_budget) {
        std::unique_lock<std::mutex> lock(budget_mu_);
        budget_cv_.wait(lock, stop, [this] { return budget_ > 0; });
      } else {
        // Nothing in flight, and the key drawn may not be read yet: wait
        // for the first read-only key that may.
        absl::Time next = absl::InfiniteFuture();
        for (int k = 0; k < kKeys; ++k) {
          if (w.reads_only[k]) next = std::min(next, w.next_read[k]);
        }
        absl::SleepFor(std::min(next - absl::Now(), kProbeInterval));
      }
    }
    const absl::Time deadline = absl::Now() + kProgressTimeout;
    while (w.outstanding > 0 && absl::Now() < deadline) w.client->Poll(absl::Milliseconds(5));
    w.stuck = w.outstanding;
    // Closing runs the callbacks of whatever is still in flight (Cancelled),
    // which the exactly-once count then sees.
    w.client.reset();
  }

  bool TakeBudget() {
    std::lock_guard<std::mutex> lock(budget_mu_);
    if (budget_ == 0) return false;
    budget_--;
    return true;
  }
  void ReturnBudget() {
    std::lock_guard<std::mutex> lock(budget_mu_);
    budget_++;
  }
  // Lets the clients issue `n` operations from now on (not more: what is
  // left of an earlier budget counts).
  void SetBudget(int64_t n) {
    {
      std::lock_guard<std::mutex> lock(budget_mu_);
      budget_ = std::max(budget_, n);
    }
    budget_cv_.notify_all();
  }

  // Waits until most clients' operations are in flight, as they will be at
  // the map change that follows: the budget was just renewed, and clients
  // that had run out of it take a moment to start again. Returns how many.
  int WaitForLoad() {
    const absl::Time deadline = absl::Now() + kProgressTimeout;
    while (in_flight_.load() < kClients * kDepth / 2 && absl::Now() < deadline) {
      absl::SleepFor(absl::Microseconds(200));
    }
    return in_flight_.load();
  }

  // Waits until kOkBetweenChanges more operations have succeeded.
  bool WaitForProgress() {
    SetBudget(kOpsPerPhase);
    const uint64_t target = ok_.load() + kOkBetweenChanges;
    const absl::Time deadline = absl::Now() + kProgressTimeout;
    while (ok_.load() < target && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    return ok_.load() >= target;
  }

  // SIGTERM: the server deregisters (the map marks it down, its keys stay
  // placed on it) and exits; then it starts again on its region file.
  void LeaveAndRejoin(const std::string& id) {
    const uint64_t generation = Generation(id);
    servers_[id]->Kill(SIGTERM);
    auto down = [&](const proto::ClusterMap& m) {
      for (const auto& s : m.servers()) {
        if (s.id() == id) return s.state() == proto::SERVER_STATE_DOWN;
      }
      return false;
    };
    ASSERT_TRUE(WaitForMap(down)) << id << " left, but the map has it up";
    StartServer(id);
    ASSERT_TRUE(WaitForNewRegion(id, generation)) << id << " did not rejoin";
  }

  std::atomic<uint64_t> ok_{0};
  std::atomic<int> in_flight_{0};
  std::mutex budget_mu_;
  std::condition_variable_any budget_cv_;
  int64_t budget_ = 0;  // Guarded by budget_mu_.
  lin::HistoryRecorder recorder_;
};

uint64_t TestSeed() {
  if (const char* s = std::getenv("RKV_CLUSTER_LIN_SEED")) return std::strtoull(s, nullptr, 10);
  return static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
}

// A change of the map, made while the load runs.
enum class Change {
  kKill,          // kill -9, restart from the region file.
  kKillLoseDisk,  // kill -9, restart without the region file.
  kLeave,         // SIGTERM (deregisters), restart from the region file.
};

void ClusterLinearizabilityTest::RunWithChanges(
    int servers, const std::vector<std::pair<std::string, Change>>& changes) {
  const absl::Time start = absl::Now();
  // The seed fixes the clients' random choices, not how their operations
  // interleave with each other and with the restarts (nor, so, which keys
  // are read-only when).
  const uint64_t seed = TestSeed();
  std::cout << "seed " << seed << " (RKV_CLUSTER_LIN_SEED=" << seed << " to choose the same)"
            << std::endl;
  StartServers(servers);
  ASSERT_FALSE(HasFatalFailure());

  std::vector<Worker> workers(kClients);
  for (int c = 0; c < kClients; ++c) {
    ClientOptions o;
    o.cluster_token = kClusterToken;
    auto client = Client::OpenCluster(address_, o);
    ASSERT_TRUE(client.ok()) << client.status();
    workers[c].client = std::move(client).value();
    workers[c].seed = seed * 31 + c;
  }
  int changes_done = 0;
  std::vector<int> in_flight_at_change;  // Summed over the clients.
  bool progressed = true;
  {
    std::vector<std::jthread> threads;
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([this, &workers, c](std::stop_token stop) { Run(workers[c], c, stop); });
    }
    progressed = WaitForProgress();
    for (const auto& [id, change] : changes) {
      if (!progressed) break;
      SetBudget(kOpsPerChange);
      in_flight_at_change.push_back(WaitForLoad());
      switch (change) {
        case Change::kKill:
          RestartServer(id);
          break;
        case Change::kKillLoseDisk:
          RestartServer(id, /*lose_region=*/true);
          break;
        case Change::kLeave:
          LeaveAndRejoin(id);
          break;
      }
      if (HasFatalFailure()) break;
      changes_done++;
      progressed = WaitForProgress();
      // Replicated: the next change meets a group with all its copies (a
      // lost server comes back blank and is copied in), as one that took
      // two before it had them again could lose every copy.
      if (progressed && Replicas() > 1) {
        ASSERT_TRUE(WaitForGroups(servers / Replicas())) << "the groups did not recover";
      }
    }
    // The jthreads are asked to stop and joined here, also after a failed
    // assertion above.
  }
  EXPECT_TRUE(progressed) << "the load made no progress after " << changes_done << " map changes";
  EXPECT_EQ(changes_done, static_cast<int>(changes.size()));

  // Every callback ran exactly once, before the client closed.
  int total = 0, never = 0, twice = 0, stuck = 0;
  std::map<absl::StatusCode, int> failures;
  for (const Worker& w : workers) {
    total += w.issued;
    stuck += w.stuck;
    for (int calls : w.calls) {
      never += calls == 0;
      twice += calls > 1;
    }
    for (const auto& [code, n] : w.failures) failures[code] += n;
    if (w.unexpected > 0) {
      ADD_FAILURE() << w.unexpected << " operations failed with codes no operation may answer; "
                    << "the first: " << w.first_unexpected;
    }
  }
  EXPECT_EQ(never, 0) << "of " << total << " operations, " << never << " never completed";
  EXPECT_EQ(twice, 0) << "of " << total << " operations, " << twice << " completed twice";
  EXPECT_EQ(stuck, 0) << stuck << " operations were still in flight "
                      << absl::FormatDuration(kProgressTimeout) << " after the load stopped";

  std::vector<lin::Operation> history = recorder_.history();
  // A GET that failed returned nothing: it constrains nothing and would
  // only widen the checker's search.
  std::erase_if(history, [](const lin::Operation& op) {
    return op.kind == lin::OpKind::kGet && op.outcome == lin::Outcome::kUnknown;
  });
  int unknown = 0;
  for (const lin::Operation& op : history) unknown += op.outcome == lin::Outcome::kUnknown;
  const absl::Time check_start = absl::Now();
  const lin::CheckResult result = lin::Check(history);
  const absl::Duration check_time = absl::Now() - check_start;

  std::cout << total << " operations issued, " << ok_.load() << " OK, " << history.size()
            << " checked (" << unknown << " writes of unknown outcome); failures:";
  for (const auto& [code, n] : failures) {
    std::cout << " " << absl::StatusCodeToString(code) << "=" << n;
  }
  std::cout << "; " << changes_done << " map changes, with operations in flight:";
  for (int n : in_flight_at_change) std::cout << " " << n;
  std::cout << "; check took " << absl::FormatDuration(check_time) << ", the whole test "
            << absl::FormatDuration(absl::Now() - start) << std::endl;

  if (!result.linearizable) {
    // The whole history, for a closer look than the failing key's.
    const std::string path =
        absl::StrCat(::testing::TempDir(), "rkv-cluster-lin-", seed, ".history");
    // One operation a line: invoke, response, client, kind, key, outcome,
    // value (written, or read).
    static constexpr const char* kKinds[] = {"get", "put", "insert", "delete"};
    static constexpr const char* kOutcomes[] = {"ok", "not-found", "already-exists", "unknown"};
    std::ofstream out(path);
    for (const lin::Operation& op : recorder_.history()) {
      out << op.invoke << " " << op.response << " c" << op.client << " "
          << kKinds[static_cast<int>(op.kind)] << " " << op.key << " "
          << kOutcomes[static_cast<int>(op.outcome)] << " " << op.value << "\n";
    }
    ADD_FAILURE() << (result.gave_up ? "the checker gave up (too many operations of unknown "
                                       "outcome on one key): inconclusive, not a violation; "
                                     : "not linearizable; ")
                  << "seed " << seed << ", whole history in " << path << "\n"
                  << result.explanation;
  }
  // Not vacuous: operations succeeded all along, and the changes met some
  // in flight or on their way.
  EXPECT_GE(ok_.load(), (changes.size() + 1) * kOkBetweenChanges);
  for (int n : in_flight_at_change) EXPECT_GT(n, 0) << "a map change met no operation in flight";
  EXPECT_GT(failures[absl::StatusCode::kUnavailable], 0)
      << "no operation failed: the map changes met none in flight";
}

// One copy: every server killed and restarted once, then every one leaving
// and rejoining once.
TEST_F(ClusterLinearizabilityTest, LinearizableWhileServersRestartAndRejoin) {
  RunWithChanges(3, {{"s1", Change::kKill},
                     {"s2", Change::kKill},
                     {"s3", Change::kKill},
                     {"s1", Change::kLeave},
                     {"s2", Change::kLeave},
                     {"s3", Change::kLeave}});
}

// Three copies on four servers (a replica group and a spare): every server
// lost with its disk in turn — the primary first — each coming back blank
// and copied in again, then one killed and one leaving with their regions.
class ReplicatedClusterLinearizabilityTest : public ClusterLinearizabilityTest {
 protected:
  int Replicas() const override { return 3; }
};

TEST_F(ReplicatedClusterLinearizabilityTest, LinearizableWhileServersLoseTheirDisks) {
  RunWithChanges(4, {{"s1", Change::kKillLoseDisk},
                     {"s2", Change::kKillLoseDisk},
                     {"s3", Change::kKillLoseDisk},
                     {"s4", Change::kKillLoseDisk},
                     {"s1", Change::kKill},
                     {"s2", Change::kLeave}});
}

}  // namespace
}  // namespace rkv::testing
