#include "tests/server/kvcoord/sim_etcd.h"

#include <algorithm>
#include <deque>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rkv::server::testing {

struct SimEtcd::WatchState {
  struct Event {
    Change change;
    absl::Time due;
    uint64_t seq = 0;
  };
  int node = 0;
  std::string key;
  etcd::WatchCallback on_change;
  // The last revision delivered: a resumed stream goes on after it.
  int64_t delivered = 0;
  bool cancelled = false;
  bool up = true;
  absl::Time down_until = absl::InfinitePast();
  std::deque<Event> queue;
};

// A transaction proposed while the quorum was lost: it commits, or not,
// once the quorum is back.
struct SimEtcd::Pending {
  int writer = 0;
  std::vector<etcd::Compare> compares;
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::string> deletes;
  bool commits = false;
};

class SimEtcd::SimWatch final : public etcd::Watch {
 public:
  explicit SimWatch(std::shared_ptr<WatchState> state) : state_(std::move(state)) {}
  ~SimWatch() override { state_->cancelled = true; }

 private:
  std::shared_ptr<WatchState> state_;
};

class SimEtcd::SimClient final : public etcd::KvStore {
 public:
  SimClient(SimEtcd& etcd, int node) : etcd_(etcd), node_(node) {}
  absl::StatusOr<std::optional<etcd::KeyValue>> Get(const std::string& key,
                                                    int64_t* revision) override {
    return etcd_.Get(node_, key, revision);
  }
  absl::StatusOr<etcd::TxnResult> Txn(const std::vector<etcd::Compare>& compares,
                                      const std::vector<std::pair<std::string, std::string>>& puts,
                                      const std::vector<std::string>& deletes) override {
    return etcd_.Txn(node_, compares, puts, deletes);
  }
  std::unique_ptr<etcd::Watch> WatchKey(const std::string& key, int64_t from,
                                        etcd::WatchCallback on_change) override {
    return etcd_.WatchKey(node_, key, from, std::move(on_change));
  }
  std::vector<etcd::MemberStatus> Status() override { return etcd_.Status(); }

 private:
  SimEtcd& etcd_;
  const int node_;
};

namespace {

std::string Describe(const std::vector<etcd::Compare>& compares,
                     const std::vector<std::pair<std::string, std::string>>& puts,
                     const std::vector<std::string>& deletes) {
  std::vector<std::string> parts;
  for (const etcd::Compare& c : compares) {
    switch (c.target) {
      case etcd::Compare::Target::kModRevision:
        parts.push_back(absl::StrCat(c.key, ".mod==", c.revision));
        break;
      case etcd::Compare::Target::kCreateRevision:
        parts.push_back(absl::StrCat(c.key, ".create==", c.revision));
        break;
      case etcd::Compare::Target::kValue:
        parts.push_back(absl::StrCat(c.key, ".value==", c.value.size(), "B"));
        break;
    }
  }
  std::string out = absl::StrCat("if ", absl::StrJoin(parts, " && "));
  for (const auto& [key, value] : puts) absl::StrAppend(&out, " put ", key);
  for (const std::string& key : deletes) absl::StrAppend(&out, " delete ", key);
  return out;
}

}  // namespace

SimEtcd::SimEtcd(uint64_t seed, Options options, std::function<void(const std::string&)> trace)
    : options_(options), rng_(seed), trace_(std::move(trace)) {}

SimEtcd::~SimEtcd() = default;

std::unique_ptr<etcd::KvStore> SimEtcd::Client(int node) {
  return std::make_unique<SimClient>(*this, node);
}

void SimEtcd::Trace(const std::string& line) {
  if (trace_) trace_(line);
}

absl::Duration SimEtcd::Between(absl::Duration lo, absl::Duration hi) {
  const int64_t a = absl::ToInt64Microseconds(lo), b = absl::ToInt64Microseconds(hi);
  return absl::Microseconds(std::uniform_int_distribution<int64_t>(a, std::max(a, b))(rng_));
}

absl::Duration SimEtcd::WatchDelay() {
  if (faults_ && Chance(0.05)) {
    Count("watch delivery delayed");
    return Between(options_.watch_delay_max / 3, options_.watch_delay_max);
  }
  return Between(absl::ZeroDuration(), absl::Milliseconds(3));
}

bool SimEtcd::Healthy() const { return now_ >= election_until_ && now_ >= quorum_until_; }

absl::Time SimEtcd::FaultsEnd() const {
  absl::Time end = std::max(election_until_, quorum_until_);
  for (const auto& [node, until] : partitioned_until_) end = std::max(end, until);
  for (const auto& w : watches_) {
    if (!w->cancelled && !w->up) end = std::max(end, w->down_until);
  }
  return end;
}

absl::StatusOr<std::optional<etcd::KeyValue>> SimEtcd::Get(int node, const std::string& key,
                                                           int64_t* revision) {
  absl::Status refused;
  if (crashed_.count(node) != 0) {
    refused = absl::UnavailableError("the process is dead");
  } else if (Partitioned(node)) {
    refused = absl::UnavailableError("cut off from every member");
  } else if (!Healthy()) {
    refused = absl::UnavailableError("no member has a leader");
  } else if (faults_ && Chance(options_.leader_change_per_call)) {
    ChangeLeader();
    refused = absl::UnavailableError("the leader changed during the read");
  }
  if (!refused.ok()) {
    Trace(absl::StrCat("node ", node, " get ", key, " -> ", refused.message()));
    return refused;
  }
  if (revision != nullptr) *revision = revision_;
  auto it = data_.find(key);
  Trace(absl::StrCat("node ", node, " get ", key, " -> ",
                     it == data_.end() ? "absent" : absl::StrCat("mod ", it->second.mod_revision),
                     " (store at ", revision_, ")"));
  if (it == data_.end()) return std::optional<etcd::KeyValue>();
  return std::optional<etcd::KeyValue>(it->second);
}

absl::StatusOr<etcd::TxnResult> SimEtcd::Txn(
    int node, const std::vector<etcd::Compare>& compares,
    const std::vector<std::pair<std::string, std::string>>& puts,
    const std::vector<std::string>& deletes) {
  const std::string what = Describe(compares, puts, deletes);
  std::set<std::string> named;
  for (const auto& [key, value] : puts) {
    if (!named.insert(key).second) return absl::InvalidArgumentError("a key put twice");
  }
  for (const std::string& key : deletes) {
    if (!named.insert(key).second) return absl::InvalidArgumentError("a key put and deleted");
  }
  auto refuse = [&](absl::Status s) -> absl::StatusOr<etcd::TxnResult> {
    Trace(absl::StrCat("node ", node, " txn ", what, " -> ", s.ToString()));
    return s;
  };
  // Sent, and no answer: it took effect, or not, as `commits` says.
  auto unknown = [&](bool commits, const std::string& why) -> absl::StatusOr<etcd::TxnResult> {
    std::string outcome = "not committed";
    if (commits) {
      const etcd::TxnResult r = Apply(node, compares, puts, deletes);
      outcome = r.succeeded ? absl::StrCat("committed at ", r.revision) : "its compares failed";
    }
    Trace(absl::StrCat("node ", node, " txn ", what, " -> DEADLINE_EXCEEDED (", why, "; in truth ",
                       outcome, ")"));
    return absl::DeadlineExceededError(why);
  };
  if (crashed_.count(node) != 0) return refuse(absl::UnavailableError("the process is dead"));
  if (Partitioned(node)) return refuse(absl::UnavailableError("cut off from every member"));
  if (now_ < election_until_) return refuse(absl::UnavailableError("no leader"));
  if (now_ < quorum_until_) {
    if (Chance(0.5)) return refuse(absl::UnavailableError("no leader"));
    // Proposed to a leader that cannot commit it (yet).
    Pending p{node, compares, puts, deletes, Chance(0.5)};
    pending_.push_back(std::move(p));
    Count("txn proposed without a quorum (outcome unknown)");
    Trace(absl::StrCat("node ", node, " txn ", what,
                       " -> DEADLINE_EXCEEDED (proposed without a quorum; ",
                       pending_.back().commits ? "commits once it is back" : "dropped", ")"));
    return absl::DeadlineExceededError("proposed without a quorum");
  }
  if (faults_ && Chance(options_.leader_change_per_call)) {
    const bool commits = Chance(0.5);
    Count(commits ? "txn in flight at a leader change, committed"
                  : "txn in flight at a leader change, lost");
    auto r = unknown(commits, "the leader changed");
    ChangeLeader();
    return r;
  }
  if (faults_ && Chance(options_.partition_per_call)) {
    const bool commits = Chance(0.5);
    Count(commits ? "txn in flight at a partition, committed"
                  : "txn in flight at a partition, lost");
    auto r = unknown(commits, "the connection broke");
    Partition(node, Between(absl::Milliseconds(10), options_.partition_max));
    return r;
  }
  const etcd::TxnResult r = Apply(node, compares, puts, deletes);
  Trace(absl::StrCat("node ", node, " txn ", what, " -> ",
                     r.succeeded ? "succeeded" : "compares failed", " (store at ", r.revision,
                     ")"));
  return r;
}

etcd::TxnResult SimEtcd::Apply(int writer, const std::vector<etcd::Compare>& compares,
                               const std::vector<std::pair<std::string, std::string>>& puts,
                               const std::vector<std::string>& deletes) {
  for (const etcd::Compare& c : compares) {
    auto it = data_.find(c.key);
    const etcd::KeyValue* kv = it == data_.end() ? nullptr : &it->second;
    bool holds = false;
    switch (c.target) {
      case etcd::Compare::Target::kModRevision:
        holds = (kv == nullptr ? 0 : kv->mod_revision) == c.revision;
        break;
      case etcd::Compare::Target::kCreateRevision:
        holds = (kv == nullptr ? 0 : kv->create_revision) == c.revision;
        break;
      case etcd::Compare::Target::kValue:
        holds = kv != nullptr && kv->value == c.value;
        break;
    }
    if (!holds) return {false, revision_};
  }
  bool changes = !puts.empty();
  for (const std::string& key : deletes) changes |= data_.count(key) != 0;
  if (!changes) return {true, revision_};
  ++revision_;
  for (const auto& [key, value] : puts) {
    auto [it, inserted] = data_.try_emplace(key);
    etcd::KeyValue& kv = it->second;
    kv.key = key;
    kv.value = value;
    if (inserted) kv.create_revision = revision_;
    kv.mod_revision = revision_;
    Record(key, writer);
  }
  for (const std::string& key : deletes) {
    if (data_.erase(key) != 0) Record(key, writer);
  }
  return {true, revision_};
}

void SimEtcd::Record(const std::string& key, int writer) {
  Change c;
  c.revision = revision_;
  auto it = data_.find(key);
  if (it != data_.end()) c.kv = it->second;
  c.writer = writer;
  c.at = now_;
  history_[key].push_back(c);
  for (const auto& w : watches_) {
    if (!w->cancelled && w->up && w->key == key) Enqueue(*w, c);
  }
}

void SimEtcd::Enqueue(WatchState& w, const Change& c) {
  absl::Time due = now_ + WatchDelay();
  // A stream delivers in order: never before the one ahead of it.
  if (!w.queue.empty()) due = std::max(due, w.queue.back().due);
  w.queue.push_back({c, due, next_seq_++});
}

std::unique_ptr<etcd::Watch> SimEtcd::WatchKey(int node, const std::string& key, int64_t from,
                                               etcd::WatchCallback on_change) {
  auto w = std::make_shared<WatchState>();
  w->node = node;
  w->key = key;
  w->on_change = std::move(on_change);
  w->delivered = (from == 0 ? revision_ + 1 : from) - 1;
  Trace(absl::StrCat("node ", node, " watches ", key, " from ", w->delivered + 1));
  if (Partitioned(node)) {
    // It connects once it can.
    w->up = false;
    w->down_until = partitioned_until_[node];
  } else {
    Resume(*w);
  }
  watches_.push_back(w);
  return std::make_unique<SimWatch>(std::move(w));
}

// (Re)opens a stream from the revision after the last delivered.
void SimEtcd::Resume(WatchState& w) {
  w.up = true;
  w.queue.clear();
  for (const Change& c : history_[w.key]) {
    if (c.revision > w.delivered) Enqueue(w, c);
  }
}

std::vector<etcd::MemberStatus> SimEtcd::Status() {
  std::vector<etcd::MemberStatus> out;
  for (uint64_t i = 1; i <= 3; ++i) {
    etcd::MemberStatus& m = out.emplace_back();
    m.endpoint = absl::StrCat("sim-", i);
    m.member_id = i;
    m.leader_id = Healthy() ? 1 : 0;
  }
  return out;
}

void SimEtcd::AdvanceTo(absl::Time now) {
  now_ = std::max(now_, now);
  if (quorum_until_ != absl::InfinitePast() && now_ >= quorum_until_ && !pending_.empty()) {
    // The quorum is back: what was proposed commits, or was dropped.
    std::vector<Pending> pending = std::move(pending_);
    pending_.clear();
    for (const Pending& p : pending) {
      if (!p.commits) continue;
      const etcd::TxnResult r = Apply(p.writer, p.compares, p.puts, p.deletes);
      Count("txn committed after its caller gave up");
      Trace(absl::StrCat(
          "quorum back: node ", p.writer, "'s ", Describe(p.compares, p.puts, p.deletes), " -> ",
          r.succeeded ? absl::StrCat("committed at ", r.revision) : "its compares failed"));
    }
  }
  for (auto it = partitioned_until_.begin(); it != partitioned_until_.end();) {
    if (now_ >= it->second) {
      Trace(absl::StrCat("node ", it->first, " reaches etcd again"));
      it = partitioned_until_.erase(it);
    } else {
      ++it;
    }
  }
  watches_.erase(
      std::remove_if(watches_.begin(), watches_.end(), [](const auto& w) { return w->cancelled; }),
      watches_.end());
  for (const auto& w : watches_) {
    if (w->up || now_ < w->down_until || Partitioned(w->node) || !Healthy()) continue;
    Trace(absl::StrCat("node ", w->node, "'s watch of ", w->key, " resumes after ", w->delivered));
    Resume(*w);
  }
}

int SimEtcd::Deliver(int node) {
  int delivered = 0;
  for (;;) {
    WatchState* next = nullptr;
    for (const auto& w : watches_) {
      if (w->cancelled || !w->up || w->queue.empty() || held_[w->node]) continue;
      if (node >= 0 && w->node != node) continue;
      const WatchState::Event& e = w->queue.front();
      if (e.due > now_) continue;
      if (next == nullptr || e.due < next->queue.front().due ||
          (e.due == next->queue.front().due && e.seq < next->queue.front().seq)) {
        next = w.get();
      }
    }
    if (next == nullptr) return delivered;
    const Change c = next->queue.front().change;
    next->queue.pop_front();
    next->delivered = c.revision;
    Trace(absl::StrCat("node ", next->node, " sees ", next->key, " ",
                       c.kv.has_value() ? absl::StrCat("written by node ", c.writer)
                                        : absl::StrCat("deleted by node ", c.writer),
                       " at ", c.revision));
    next->on_change(c.kv, c.revision);
    ++delivered;
  }
}

void SimEtcd::ChangeLeader() {
  const absl::Duration election = Between(options_.election_min, options_.election_max);
  election_until_ = std::max(election_until_, now_ + election);
  Count("etcd leader change");
  Trace(absl::StrCat("FAULT etcd's leader lost: an election for ", absl::FormatDuration(election)));
  // Streams on the old leader break; the others go on.
  for (const auto& w : watches_) {
    if (w->cancelled || !w->up || !Chance(0.5)) continue;
    w->up = false;
    w->down_until = election_until_;
  }
}

void SimEtcd::LoseQuorum(absl::Duration for_how_long) {
  quorum_until_ = std::max(quorum_until_, now_ + for_how_long);
  Count("etcd quorum lost");
  Trace(absl::StrCat("FAULT etcd's quorum lost for ", absl::FormatDuration(for_how_long)));
}

void SimEtcd::Partition(int node, absl::Duration for_how_long) {
  absl::Time& until = partitioned_until_[node];
  until = std::max(until, now_ + for_how_long);
  Count("node cut off from etcd");
  Trace(absl::StrCat("FAULT node ", node, " cut off from etcd for ",
                     absl::FormatDuration(for_how_long)));
  for (const auto& w : watches_) {
    if (w->cancelled || w->node != node) continue;
    w->up = false;
    w->down_until = std::max(w->down_until, until);
  }
}

void SimEtcd::BreakWatches(int node, absl::Duration down_for) {
  Count("watch stream broken");
  Trace(absl::StrCat("FAULT node ", node, "'s watch streams break for ",
                     absl::FormatDuration(down_for)));
  for (const auto& w : watches_) {
    if (w->cancelled || w->node != node) continue;
    w->up = false;
    w->down_until = std::max(w->down_until, now_ + down_for);
  }
}

void SimEtcd::Hold(int node, bool held) { held_[node] = held; }

void SimEtcd::Crash(int node) {
  crashed_.insert(node);
  for (const auto& w : watches_) {
    if (w->node == node) w->cancelled = true;
  }
}

void SimEtcd::Revive(int node) { crashed_.erase(node); }

}  // namespace rkv::server::testing
