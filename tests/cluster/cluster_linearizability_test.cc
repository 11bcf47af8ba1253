// The cluster client checked for linearizability while the map changes
// under it: clients on threads of their own keep several operations in
// flight on a small key set while each server in turn is killed with
// SIGKILL and restarted from its region file (a new generation and rkey),
// and one leaves (SIGTERM: it deregisters) and rejoins. The history of
// every operation is then checked (tests/linearizability/checker.h).
#include <signal.h>

#include <algorithm>
#include <atomic>
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
constexpr int kKeys = 24;
// Weights of get, put, insert, delete.
constexpr int kWeights[4] = {4, 3, 2, 2};
// Operations that must succeed before the first map change, and after each
// one is visible in the coordinator's map before the next: so that each
// change meets a running load, and the clients are seen to recover.
constexpr uint64_t kOkBetweenChanges = 250;
// Bounds the history (and so the checker's work, about a second for this
// many) whatever the timing; a run issues a fifth of it or less.
constexpr int kMaxOpsPerClient = 50'000;
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

class ClusterLinearizabilityTest : public ClusterFixture {
 protected:
  // Issues one random operation on `w`'s client and records it.
  void Issue(Worker& w, int id, Rng& rng) {
    const int k = static_cast<int>(rng.Uniform(kKeys));
    const std::string key = absl::StrCat("key", k);
    const int seq = w.issued++;
    // Unique, so that a read names the write it saw.
    const std::string value = absl::StrCat("c", id, "-", seq);
    int pick = static_cast<int>(rng.Uniform(kWeights[0] + kWeights[1] + kWeights[2] + kWeights[3]));
    int kind = 0;
    while (pick >= kWeights[kind]) pick -= kWeights[kind++];
    if (w.reads_only[k]) kind = 0;
    w.calls.push_back(0);
    w.outstanding++;
    // Runs once per callback; a second run is counted, not recorded.
    auto complete = [this, &w, seq, k](size_t op, lin::OpKind kind, const absl::Status& s,
                                       std::string read) {
      if (w.calls[seq]++ > 0) return;
      w.outstanding--;
      const lin::Outcome outcome = OutcomeOf(kind, s, w);
      if (outcome == lin::Outcome::kOk) ok_.fetch_add(1, std::memory_order_relaxed);
      if (outcome == lin::Outcome::kUnknown) {
        w.reads_only[k] = true;
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
  }

  // A client thread: keeps kDepth operations in flight until told to stop
  // (or kMaxOpsPerClient are issued), then lets those in flight finish.
  void Run(Worker& w, int id, std::stop_token stop) {
    Rng rng(w.seed);
    while (!stop.stop_requested() && w.issued < kMaxOpsPerClient) {
      while (w.outstanding < kDepth && w.issued < kMaxOpsPerClient) Issue(w, id, rng);
      w.client->Poll(absl::Milliseconds(1));
    }
    const absl::Time deadline = absl::Now() + kProgressTimeout;
    while (w.outstanding > 0 && absl::Now() < deadline) w.client->Poll(absl::Milliseconds(5));
    w.stuck = w.outstanding;
    // Closing runs the callbacks of whatever is still in flight (Cancelled),
    // which the exactly-once count then sees.
    w.client.reset();
  }

  // Waits until kOkBetweenChanges more operations have succeeded.
  bool WaitForProgress() {
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
  lin::HistoryRecorder recorder_;
};

uint64_t TestSeed() {
  if (const char* s = std::getenv("RKV_CLUSTER_LIN_SEED")) return std::strtoull(s, nullptr, 10);
  return static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
}

TEST_F(ClusterLinearizabilityTest, LinearizableWhileServersRestartAndRejoin) {
  const absl::Time start = absl::Now();
  // The seed fixes the clients' random choices, not how their operations
  // interleave with each other and with the restarts (nor, so, which keys
  // are read-only when).
  const uint64_t seed = TestSeed();
  std::cout << "seed " << seed << " (RKV_CLUSTER_LIN_SEED=" << seed << " to choose the same)"
            << std::endl;
  StartThree();
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
  // The map changes, each with operations in flight: every server killed
  // and restarted once, then every one leaving and rejoining once.
  const std::vector<std::pair<std::string, bool>> changes = {
      {"s1", true}, {"s2", true}, {"s3", true}, {"s1", false}, {"s2", false}, {"s3", false}};
  int changes_done = 0;
  bool progressed = true;
  {
    std::vector<std::jthread> threads;
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([this, &workers, c](std::stop_token stop) { Run(workers[c], c, stop); });
    }
    progressed = WaitForProgress();
    for (const auto& [id, kill9] : changes) {
      if (!progressed) break;
      if (kill9) {
        RestartServer(id);
      } else {
        LeaveAndRejoin(id);
      }
      if (HasFatalFailure()) break;
      changes_done++;
      progressed = WaitForProgress();
    }
    // The jthreads are asked to stop and joined here, also after a failed
    // assertion above.
  }
  EXPECT_TRUE(progressed) << "the load made no progress after " << changes_done << " map changes";
  EXPECT_EQ(changes_done, static_cast<int>(changes.size()));

  // Every callback ran exactly once, before the client closed.
  int total = 0, never = 0, twice = 0, stuck = 0, unexpected = 0;
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
    unexpected += w.unexpected;
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
  for (const auto& [code, n] : failures)
    std::cout << " " << absl::StatusCodeToString(code) << "=" << n;
  std::cout << "; " << changes_done << " map changes; check took "
            << absl::FormatDuration(check_time) << ", the whole test "
            << absl::FormatDuration(absl::Now() - start) << std::endl;

  if (!result.linearizable) {
    // The whole history, for a closer look than the failing key's.
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/rkv-cluster-lin-", seed, ".history");
    std::ofstream out(path);
    for (const lin::Operation& op : recorder_.history()) {
      out << op.invoke << " " << op.response << " c" << op.client << " "
          << static_cast<int>(op.kind) << " " << op.key << " " << static_cast<int>(op.outcome)
          << " " << op.value << "\n";
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
  EXPECT_GT(failures[absl::StatusCode::kUnavailable], 0)
      << "no operation failed: the map changes met none in flight";
  EXPECT_EQ(unexpected, 0);
}

}  // namespace
}  // namespace rkv::testing
