// The coordinators' leadership (EtcdStateStore, the real code) over a
// simulated etcd (sim_etcd.h), in one thread, on a simulated clock, for
// many seeds. Each seed runs two or three stores, driven through their
// core (Due, Do) as their threads would drive them, with:
// - clocks that run at rates up to 5 % off true time either way, which
//   keeps any two within the 0.9 margin the store's header states;
// - a store paused — between deciding an action and carrying it out, or
//   for long, past its lease — its watch deliveries held meanwhile;
// - etcd's faults: leader changes with a transaction in flight, a quorum
//   lost for a while, a store cut off, watch streams broken, deliveries
//   delayed;
// - commits by whoever believes it leads, of a state prepared then and
//   committed a little later, as the coordinator's handlers do.
// After every step it checks that no two stores may order at once (each
// judged on its own clock at the same true instant), that the stored
// state only ever grows from the last one committed (terms never go back,
// a term is one store's, each change builds on the one before, a
// takeover keeps what was stored), that a commit reported stored is, and
// that once the faults are over some store leads again within a bound.
//
// RKV_SIM_SEEDS=N runs seeds 1..N; RKV_SIM_SEED=S runs seed S alone and
// prints its trace.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "gtest/gtest.h"
#include "server/kvcoord/etcd_state_store.h"
#include "tests/server/kvcoord/sim_etcd.h"

namespace rkv::server {
namespace {

using testing::SimEtcd;
using Action = EtcdStateStore::Action;

constexpr absl::Duration kLease = absl::Milliseconds(1500);
constexpr char kPrefix[] = "/sim";
constexpr char kStateKey[] = "/sim/state";
// Faults are drawn for this long; then the run goes on until some store
// has led again, kProgressBound at most after the last fault ended.
constexpr absl::Duration kFaultsFor = absl::Seconds(20);
constexpr absl::Duration kProgressBound = kLease;
// The clocks' rates: any two measure a time within (1.05 / 0.95) of each
// other, under the 1 / 0.9 the leadership's margin allows.
constexpr double kRateSpread = 0.05;

absl::Time Start() { return absl::UnixEpoch() + absl::Hours(1); }

std::string At(absl::Time t) {
  return absl::StrFormat("%9.4fs", absl::ToDoubleSeconds(t - Start()));
}

// What a coordinator keeps of what its store tells it.
class Recorder : public StateStore::Listener {
 public:
  explicit Recorder(std::function<void(const std::string&, const proto::ClusterMap&)> on_call)
      : on_call_(std::move(on_call)) {}
  void OnLead(const proto::ClusterMap& state) override {
    last = state;
    on_call_("leads", state);
  }
  void OnFollow(const proto::ClusterMap& state) override {
    // As the coordinator: an older state than the one it has is dropped.
    if (state.epoch() < last.epoch() && state.term() <= last.term()) return;
    last = state;
    on_call_("follows", state);
  }
  proto::ClusterMap last;

 private:
  std::function<void(const std::string&, const proto::ClusterMap&)> on_call_;
};

struct Node {
  int id = 0;
  double rate = 1;
  absl::Duration offset;
  std::unique_ptr<Recorder> recorder;
  std::unique_ptr<EtcdStateStore> store;
  // Paused (its process stopped) until then.
  absl::Time paused_until = absl::InfinitePast();
  // An action decided and not yet carried out.
  Action pending = Action::kNone;
  // A state prepared by a handler, to be committed later.
  std::optional<proto::ClusterMap> prepared;

  absl::Time Local(absl::Time t) const { return Start() + offset + (t - Start()) * rate; }
};

class Simulation {
 public:
  Simulation(uint64_t seed, bool keep_trace)
      : seed_(seed),
        keep_trace_(keep_trace),
        rng_(seed),
        etcd_(seed * 7919 + 1, {}, [this](const std::string& line) { Trace(line); }) {}

  // Runs the seed; empty, or what went wrong.
  std::string Run() {
    now_ = Start();
    etcd_.AdvanceTo(now_);
    const int n = 2 + int(rng_() % 2);
    for (int i = 0; i < n; ++i) {
      auto node = std::make_unique<Node>();
      node->id = i;
      node->rate = 1 + std::uniform_real_distribution<double>(-kRateSpread, kRateSpread)(rng_);
      node->offset = Between(absl::ZeroDuration(), absl::Seconds(100));
      Trace(absl::StrCat("node ", i, "'s clock runs at ", node->rate, " of true time"));
      nodes_.push_back(std::move(node));
    }
    for (auto& node : nodes_) {
      if (!Open(*node)) return "Start failed";
    }
    const absl::Time faults_until = now_ + kFaultsFor;
    absl::Time quiet_since = absl::InfiniteFuture();
    while (error_.empty()) {
      now_ += Between(absl::Microseconds(500), absl::Milliseconds(10));
      etcd_.AdvanceTo(now_);
      if (now_ < faults_until) {
        DrawFaults();
      } else if (quiet_since == absl::InfiniteFuture()) {
        etcd_.set_faults(false);
        absl::Time end = etcd_.FaultsEnd();
        for (const auto& node : nodes_) end = std::max(end, node->paused_until);
        if (now_ >= end) {
          quiet_since = now_;
          Trace("every fault is over");
        }
      }
      std::vector<Node*> order;
      for (auto& node : nodes_) order.push_back(node.get());
      std::shuffle(order.begin(), order.end(), rng_);
      for (Node* node : order) {
        if (!error_.empty()) break;
        Step(*node);
      }
      if (!error_.empty()) break;
      if (quiet_since != absl::InfiniteFuture()) {
        for (const auto& node : nodes_) {
          if (CanOrder(*node)) return error_;  // Led again: the run is over.
        }
        if (now_ > quiet_since + kProgressBound) {
          Fail(absl::StrCat("no store leads ", absl::FormatDuration(now_ - quiet_since),
                            " after the last fault ended"));
        }
      }
    }
    return error_;
  }

  // How often each kind of fault (and of event the faults are for) happened.
  std::map<std::string, int> counts() const {
    std::map<std::string, int> all = etcd_.counts();
    for (const auto& [kind, n] : counts_) all[kind] += n;
    return all;
  }
  const std::vector<std::string>& trace() const { return trace_; }

 private:
  void Trace(const std::string& line) {
    if (!keep_trace_ && trace_.size() >= 4000) {
      // Keep the end, where a failure is.
      trace_.erase(trace_.begin(), trace_.begin() + 2000);
    }
    trace_.push_back(absl::StrCat(At(now_), "  ", line));
  }
  void Fail(const std::string& what) {
    if (error_.empty()) error_ = absl::StrCat("at ", At(now_), ": ", what);
    Trace(absl::StrCat("FAILED: ", what));
  }
  absl::Duration Between(absl::Duration lo, absl::Duration hi) {
    return absl::Microseconds(std::uniform_int_distribution<int64_t>(
        absl::ToInt64Microseconds(lo), absl::ToInt64Microseconds(hi))(rng_));
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  bool Paused(const Node& node) const { return now_ < node.paused_until; }
  bool CanOrder(const Node& node) const {
    return node.store->leadership().CanOrder(node.Local(now_));
  }

  // A coordinator process starts (again) on the node: a store of its own.
  bool Open(Node& node) {
    Node* raw = &node;
    node.recorder = std::make_unique<Recorder>(
        [this, raw](const std::string& what, const proto::ClusterMap& s) {
          OnListener(*raw, what, s);
        });
    EtcdStoreOptions o;
    o.prefix = kPrefix;
    o.id = absl::StrCat("c", node.id);
    o.address = absl::StrCat("10.0.0.", node.id, ":7400");
    o.lease = kLease;
    o.own_thread = false;
    o.clock = [this, raw] { return raw->Local(now_); };
    node.store = std::make_unique<EtcdStateStore>(etcd_.Client(node.id), std::move(o));
    node.pending = Action::kNone;
    node.prepared.reset();
    return node.store->Start(*node.recorder).ok();
  }

  // Its process killed (nothing handed on) or stopped (the leadership
  // handed on), and started again.
  void Restart(Node& node, bool kill) {
    counts_[kill ? "coordinator killed" : "coordinator stopped"]++;
    Trace(absl::StrCat("FAULT node ", node.id, kill ? " killed" : " stopped", " and restarted"));
    if (kill) {
      etcd_.Crash(node.id);
    } else {
      node.store->Stop();
    }
    node.store.reset();
    etcd_.Revive(node.id);
    if (!Open(node)) Fail("Start failed");
    Check();
  }

  void DrawFaults() {
    // Per step of 5 ms on average: a few of each per seed.
    if (Chance(1.0 / 3000)) etcd_.ChangeLeader();
    if (Chance(1.0 / 4000)) etcd_.LoseQuorum(Between(absl::Milliseconds(200), kLease * 2));
    Node& node = *nodes_[rng_() % nodes_.size()];
    if (Chance(1.0 / 2000)) etcd_.Partition(node.id, Between(absl::Milliseconds(50), kLease));
    if (Chance(1.0 / 1500)) etcd_.BreakWatches(node.id, Between(absl::ZeroDuration(), kLease / 3));
    if (!Paused(node) && Chance(1.0 / 1500)) {
      // Long: past the lease, so that the others take over meanwhile.
      Pause(node, Between(kLease / 3, kLease * 2), "paused");
    }
    if (!Paused(node) && Chance(1.0 / 4000)) Restart(node, Chance(0.5));
  }

  void Pause(Node& node, absl::Duration d, const char* why) {
    node.paused_until = now_ + d;
    etcd_.Hold(node.id, true);
    counts_[d > kLease                                  ? "node paused past its lease"
            : d > EtcdStateStore::TakeoverAfter(kLease) ? "node paused past takeover"
                                                        : "node paused briefly"]++;
    Trace(absl::StrCat("FAULT node ", node.id, " ", why, " for ", absl::FormatDuration(d)));
  }

  void Step(Node& node) {
    if (Paused(node)) return;
    if (node.paused_until != absl::InfinitePast()) {
      node.paused_until = absl::InfinitePast();
      etcd_.Hold(node.id, false);
      Trace(absl::StrCat("node ", node.id, " runs again"));
      Check();
    }
    // Its watch thread runs when it will: before or after its main one.
    if (Chance(0.7)) {
      etcd_.Deliver(node.id);
      Check();
    }
    if (node.pending != Action::kNone) {
      const Action a = node.pending;
      node.pending = Action::kNone;
      Do(node, a);
    } else if (const Action a = node.store->Due(); a != Action::kNone) {
      if (Chance(0.1)) {
        // Descheduled between deciding and doing: others (its own watch
        // thread too) go first.
        node.pending = a;
        Trace(absl::StrCat("node ", node.id, " decides to ", EtcdStateStore::ActionName(a)));
        if (Chance(0.3)) Pause(node, Between(absl::Milliseconds(1), kLease / 2), "descheduled");
      } else {
        Do(node, a);
      }
    }
    if (!Paused(node)) Handlers(node);
  }

  void Do(Node& node, Action a) {
    Trace(absl::StrCat("node ", node.id, " does ", EtcdStateStore::ActionName(a)));
    node.store->Do(a);
    Check();
  }

  // The coordinator's handlers: a change prepared while it may order,
  // committed a little later.
  void Handlers(Node& node) {
    if (!node.prepared.has_value() && Chance(0.05) && CanOrder(node)) {
      proto::ClusterMap next = node.recorder->last;
      next.set_epoch(next.epoch() + 1);
      next.set_replicas(int(rng_() % 1000));
      node.prepared = next;
      Trace(
          absl::StrCat("node ", node.id, " prepares epoch ", next.epoch(), " term ", next.term()));
    }
    if (!node.prepared.has_value() || !Chance(0.1)) return;
    const proto::ClusterMap state = *node.prepared;
    const absl::Status s = node.store->Commit(state);
    Trace(absl::StrCat("node ", node.id, " commits epoch ", state.epoch(), " term ", state.term(),
                       " -> ", s.ok() ? "OK" : s.ToString()));
    if (s.ok()) {
      counts_["commit"]++;
      node.recorder->last = state;
      const std::vector<SimEtcd::Change>& h = etcd_.History(kStateKey);
      proto::ClusterMap stored;
      if (h.empty() || !h.back().kv.has_value() || !stored.ParseFromString(h.back().kv->value) ||
          stored.SerializeAsString() != state.SerializeAsString()) {
        Fail(absl::StrCat("node ", node.id, "'s commit of epoch ", state.epoch(),
                          " was reported stored and is not"));
      }
    }
    if (s.ok() || Chance(0.5)) node.prepared.reset();
    Check();
  }

  void OnListener(Node& node, const std::string& what, const proto::ClusterMap& s) {
    Trace(absl::StrCat("node ", node.id, " ", what, " from epoch ", s.epoch(), " term ", s.term()));
    if (what != "leads") return;
    counts_["takeover"]++;
    const std::vector<SimEtcd::Change>& h = etcd_.History(kStateKey);
    proto::ClusterMap stored;
    if (h.empty() || !stored.ParseFromString(h.back().kv->value) ||
        stored.SerializeAsString() != s.SerializeAsString()) {
      Fail(absl::StrCat("node ", node.id, " leads from a state that is not the one stored"));
    }
  }

  // The invariants, after every step.
  void Check() {
    // No instant at which two may order: each on its own clock, now.
    for (size_t i = 0; i < nodes_.size(); ++i) {
      for (size_t j = i + 1; j < nodes_.size(); ++j) {
        const Node& a = *nodes_[i];
        const Node& b = *nodes_[j];
        // A paused process orders nothing; it looks at its clock again
        // once it runs.
        if (Paused(a) || Paused(b) || !CanOrder(a) || !CanOrder(b)) continue;
        Fail(absl::StrCat("nodes ", a.id, " (term ", a.store->leadership().term, ") and ", b.id,
                          " (term ", b.store->leadership().term, ") may both order"));
      }
    }
    // The stored state: every change since the last check.
    const std::vector<SimEtcd::Change>& h = etcd_.History(kStateKey);
    for (; checked_ < h.size(); ++checked_) {
      const SimEtcd::Change& c = h[checked_];
      proto::ClusterMap s;
      if (!c.kv.has_value() || !s.ParseFromString(c.kv->value)) {
        Fail(absl::StrCat("the state was deleted or is not a map at ", c.revision));
        return;
      }
      const std::string what =
          absl::StrCat("node ", c.writer, " stored epoch ", s.epoch(), " term ", s.term(),
                       " after epoch ", last_.epoch(), " term ", last_.term());
      if (s.term() == last_.term() + 1) {
        // A takeover: the state as stored, under the next term.
        if (s.epoch() != last_.epoch() || s.replicas() != last_.replicas()) {
          Fail(absl::StrCat(what, ": a takeover that lost or forked the state"));
        }
        if (owner_.count(s.term()) != 0) Fail(absl::StrCat(what, ": the term was taken twice"));
        owner_[s.term()] = c.writer;
      } else if (s.term() == last_.term() && checked_ > 0) {
        if (s.epoch() != last_.epoch() + 1) {
          Fail(absl::StrCat(what, ": a change that does not build on the last committed"));
        }
        if (owner_[s.term()] != c.writer) {
          Fail(absl::StrCat(what, ": term ", s.term(), " is node ", owner_[s.term()],
                            "'s: a deposed or other store changed the state"));
        }
      } else {
        Fail(absl::StrCat(what, ": the term went ", s.term() < last_.term() ? "back" : "astray"));
      }
      last_ = s;
    }
  }

  const uint64_t seed_;
  const bool keep_trace_;
  std::mt19937_64 rng_;
  absl::Time now_ = Start();
  std::vector<std::string> trace_;
  SimEtcd etcd_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::string error_;
  size_t checked_ = 0;
  proto::ClusterMap last_;
  std::map<uint64_t, int> owner_;
  std::map<std::string, int> counts_;
};

std::optional<uint64_t> EnvNumber(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::nullopt;
  return std::strtoull(env, nullptr, 10);
}

TEST(EtcdStateStoreSimTest, NoTwoLeadersAndNoLostStateUnderFaults) {
  uint64_t seeds = EnvNumber("RKV_SIM_SEEDS").value_or(1000);
  uint64_t first = 1;
  const std::optional<uint64_t> one = EnvNumber("RKV_SIM_SEED");
  if (one.has_value()) {
    first = *one;
    seeds = 1;
  }
  ASSERT_GT(seeds, 0u) << "RKV_SIM_SEEDS must be a positive number";
  SetMinLogSeverity(LogSeverity::kError);
  std::map<std::string, int> counts;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    Simulation sim(seed, one.has_value());
    const std::string error = sim.Run();
    for (const auto& [kind, n] : sim.counts()) counts[kind] += n;
    if (one.has_value()) {
      for (const std::string& line : sim.trace()) std::cout << line << "\n";
    }
    const std::vector<std::string>& trace = sim.trace();
    const size_t tail = std::min<size_t>(trace.size(), 150);
    ASSERT_TRUE(error.empty()) << "seed " << seed << ": " << error
                               << "\nreplay: RKV_SIM_SEED=" << seed
                               << " ./etcd_state_store_sim_test\nthe trace's last " << tail
                               << " lines:\n"
                               << absl::StrJoin(trace.end() - tail, trace.end(), "\n");
  }
  std::cout << seeds << " seeds:";
  for (const auto& [kind, n] : counts) std::cout << "\n  " << kind << ": " << n;
  std::cout << "\n";
  if (one.has_value()) return;
  // Every kind of fault happened, or the run proves less than it says.
  for (const char* kind :
       {"etcd leader change", "txn in flight at a leader change, committed",
        "txn in flight at a leader change, lost", "etcd quorum lost",
        "txn proposed without a quorum (outcome unknown)", "txn committed after its caller gave up",
        "node cut off from etcd", "txn in flight at a partition, committed", "watch stream broken",
        "watch delivery delayed", "node paused past its lease", "node paused past takeover",
        "node paused briefly", "coordinator killed", "coordinator stopped", "takeover", "commit"}) {
    EXPECT_GT(counts[kind], 0) << "never happened: " << kind;
  }
}

// A seed is a run: the same seed, the same events, in the same order (what
// makes a failing seed's replay show the failure).
TEST(EtcdStateStoreSimTest, ASeedReplaysTheSameRun) {
  SetMinLogSeverity(LogSeverity::kError);
  Simulation first(7, /*keep_trace=*/true);
  Simulation second(7, /*keep_trace=*/true);
  EXPECT_EQ(first.Run(), "");
  EXPECT_EQ(second.Run(), "");
  EXPECT_GT(first.trace().size(), 1000u);
  EXPECT_EQ(first.trace(), second.trace());
}

}  // namespace
}  // namespace rkv::server
