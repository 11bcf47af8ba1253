// The cluster client: rkv::Client over the coordinator's map. It composes
// the parts of this folder — the map watcher, routing, the groups'
// sessions, the retry policy and the operation pool — and carries each
// operation from the call to its callback: routed to a group, handed to
// its session (or waiting while it connects, or parked while the group
// reconfigures), retried where that is safe, completed exactly once. All
// of it runs on the thread that calls the client; only blocking work
// (connects, map fetches) runs elsewhere, on its executor, and the watch
// stream in its map source. Those two are shells with no decision in them,
// chosen when the client opens (OpenOptions): the coordinators over gRPC
// and two threads by default, maps fed by hand and work run on one thread
// in the deterministic simulation.
#include "client/cluster/cluster_client.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "client/cluster/background_worker.h"
#include "client/cluster/coordinator_map_source.h"
#include "client/cluster/executor.h"
#include "client/cluster/group_sessions.h"
#include "client/cluster/map_source.h"
#include "client/cluster/map_watcher.h"
#include "client/cluster/op_pool.h"
#include "client/cluster/retry_policy.h"
#include "client/session/client_resources.h"
#include "common/status.h"
#include "rkv/client.h"

namespace rkv {
namespace {

using client_internal::ClientResources;
using client_internal::Executor;
using client_internal::Group;
using client_internal::MapSource;
using client_internal::MapWatcher;
using client_internal::OpPtr;
using client_internal::RegionSession;

// What the groups' sessions are opened with: the client's options, less
// what is the cluster client's alone.
client_internal::OpenOptions SessionOptions(client_internal::OpenOptions options) {
  options.map_source = nullptr;
  options.executor = nullptr;
  return options;
}

const absl::Status& StatusOf(const absl::Status& s) { return s; }
const absl::Status& StatusOf(const absl::StatusOr<std::string>& s) { return s.status(); }

class ClusterClient final : public Client, private MapWatcher::Listener {
 public:
  ClusterClient(std::shared_ptr<MapSource> maps, const client_internal::OpenOptions& options,
                std::shared_ptr<ClientResources> resources)
      : resources_(resources),
        clock_(OrMonotonic(options.clock)),
        ops_(options.max_outstanding),
        groups_(SessionOptions(options), std::move(resources),
                [this](Group& g, const absl::Status& failed) { OnConnected(g, failed); }),
        map_(std::move(maps), *this),
        make_executor_(options.executor) {}

  ~ClusterClient() override {
    // A session finishing an operation as it closes must not retry it: the
    // executor that fetches maps is gone.
    closing_ = true;
    executor_.reset();  // Its jobs use map_ and the sessions' resources.
    // Every operation completes once: the sessions cancel theirs as they
    // close, and this client cancels those it holds.
    const absl::Status closed = absl::CancelledError("the client was closed");
    for (OpPtr& op : groups_.Close()) Fail(std::move(op), closed);
    for (std::deque<OpPtr>* q : {&retries_, &unstarted_}) {
      for (OpPtr& op : *q) Fail(std::move(op), closed);
      q->clear();
    }
    RunReady();
  }

  absl::Status Init() {
    RKV_RETURN_IF_ERROR(map_.FetchNow());
    executor_ = make_executor_
                    ? make_executor_()
                    : std::make_unique<client_internal::BackgroundWorker>(kBackgroundThreads);
    map_.Watch();
    return absl::OkStatus();
  }

  void GetAsync(absl::string_view key, GetCallback done) override {
    Dispatch(ops_.New(OpType::kGet, key, "", std::move(done), nullptr));
  }
  void PutAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    Dispatch(ops_.New(OpType::kPut, key, value, nullptr, std::move(done)));
  }
  void InsertAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    Dispatch(ops_.New(OpType::kInsert, key, value, nullptr, std::move(done)));
  }
  void DeleteAsync(absl::string_view key, DoneCallback done) override {
    Dispatch(ops_.New(OpType::kDelete, key, "", nullptr, std::move(done)));
  }

  size_t Poll(absl::Duration timeout) override;

  size_t in_flight() const override {
    size_t n = ready_.size() + retries_.size() + unstarted_.size() + groups_.waiting();
    groups_.ForEachSession([&n](const RegionSession& s) { n += s.in_flight(); });
    return n;
  }

  OpCosts costs(OpType type) const override { return groups_.costs(type); }
  OpStats stats(OpType type) const override { return ops_.stats(type); }

 private:
  // Connects and map fetches; two, so that a connect to a server that does
  // not answer (bounded by its connect timeout) does not hold up the map.
  static constexpr int kBackgroundThreads = 2;

  // MapWatcher::Listener.
  void Adopt(const proto::ClusterMap& map) override;
  void FetchEnded() override;

  void Dispatch(OpPtr op);
  // Hands `op` to `session`.
  void Submit(RegionSession& session, OpPtr op);
  // A session finished `op` with `result`: retries it where that is safe,
  // or runs its callback.
  template <typename Result>
  void OnDone(client_internal::ClusterOp* op, Result result);
  // `g`'s connect ended: the operations that waited for it go to its
  // session, or fail as `failed` says.
  void OnConnected(Group& g, const absl::Status& failed);
  // Operations parked on reconfiguring groups: dispatched again once their
  // group serves, failed once they waited too long.
  void Unpark();
  // Completes `op` with `s` inside the next Poll().
  void Fail(OpPtr op, absl::Status s) { ready_.push_back({std::move(op), std::move(s)}); }
  // Runs the completions Fail queued; returns how many.
  size_t RunReady();

  const std::shared_ptr<ClientResources> resources_;
  // Parking limits and idle polls are timed on it, as the sessions' leases.
  const Clock clock_;
  client_internal::OpPool ops_;
  client_internal::GroupSessions groups_;
  absl::Duration lease_ = absl::Seconds(3);  // The map's.
  size_t parked_ = 0;                        // Operations waiting for a group to serve again.
  absl::Time next_idle_poll_;  // When the sessions with nothing in flight are polled next.
  std::deque<std::pair<OpPtr, absl::Status>> ready_;  // Failed, callbacks to run.
  std::deque<OpPtr> retries_;                         // In order of needs_fetch.
  std::deque<OpPtr> unstarted_;                       // Never started; dispatched in the next Poll.
  MapWatcher map_;
  const std::function<std::unique_ptr<Executor>()> make_executor_;
  std::unique_ptr<Executor> executor_;
  bool closing_ = false;  // The destructor has begun.
};

void ClusterClient::Adopt(const proto::ClusterMap& map) {
  if (map.lease_ms() > 0) lease_ = absl::Milliseconds(map.lease_ms());
  groups_.Adopt(map, unstarted_);
}

void ClusterClient::FetchEnded() {
  while (!retries_.empty() && retries_.front()->needs_fetch <= map_.fetched()) {
    OpPtr op = std::move(retries_.front());
    retries_.pop_front();
    Dispatch(std::move(op));
  }
}

void ClusterClient::Dispatch(OpPtr op) {
  map_.Sync();
  Group* g = groups_.Route(op->key);
  if (g == nullptr)
    return Fail(std::move(op), absl::UnavailableError("the cluster map has no servers"));
  if (g->info.state() == proto::GROUP_STATE_RECONFIGURING) {
    // Its copies are being made to agree: the operation waits for that
    // rather than fail at once.
    if (op->park_until == absl::InfiniteFuture()) {
      op->park_until = clock_() + client_internal::ParkingLimit(lease_);
    }
    g->waiting.push_back(std::move(op));
    parked_++;
    return;
  }
  if (absl::Status serves = client_internal::Serves(*g); !serves.ok()) {
    return Fail(std::move(op), std::move(serves));
  }
  if (g->session) return Submit(*g->session, std::move(op));
  g->waiting.push_back(std::move(op));
  if (!g->connecting) groups_.Connect(*g, *executor_);
}

void ClusterClient::OnConnected(Group& g, const absl::Status& failed) {
  std::deque<OpPtr> waiting = std::move(g.waiting);
  g.waiting.clear();
  for (OpPtr& op : waiting) {
    if (failed.ok()) {
      Submit(*g.session, std::move(op));
    } else {
      Fail(std::move(op), failed);
    }
  }
}

void ClusterClient::Submit(RegionSession& session, OpPtr owned) {
  client_internal::ClusterOp* op = owned.release();  // The callback takes it back.
  if (op->type == OpType::kGet) {
    session.Submit(
        op->type, op->key, "",
        [this, op](absl::StatusOr<std::string> v) { OnDone(op, std::move(v)); }, nullptr);
  } else {
    session.Submit(op->type, op->key, op->value, nullptr,
                   [this, op](absl::Status st) { OnDone(op, std::move(st)); });
  }
}

template <typename Result>
void ClusterClient::OnDone(client_internal::ClusterOp* raw, Result result) {
  OpPtr op(raw);
  if (!result.ok() && !closing_ && client_internal::MayRetry(*op, StatusOf(result))) {
    op->retried = true;
    op->needs_fetch = map_.Fetch(*executor_);
    retries_.push_back(std::move(op));
    return;
  }
  client_internal::OpPool::Callbacks callbacks = ops_.Release(std::move(op), StatusOf(result));
  if constexpr (std::is_same_v<Result, absl::Status>) {
    callbacks.on_done(std::move(result));
  } else {
    callbacks.on_get(std::move(result));
  }
}

void ClusterClient::Unpark() {
  if (parked_ == 0) return;
  map_.Sync();
  const absl::Time now = clock_();
  parked_ = 0;
  for (auto& [id, g] : groups_.groups()) {
    if (g.waiting.empty()) continue;
    if (g.info.state() == proto::GROUP_STATE_RECONFIGURING) {
      // Still reconfiguring: fail those that waited long enough.
      std::deque<OpPtr> kept;
      for (OpPtr& op : g.waiting) {
        if (op->park_until > now) {
          parked_ += op->park_until != absl::InfiniteFuture();
          kept.push_back(std::move(op));
        } else {
          Fail(std::move(op), client_internal::StillReconfiguring(id, lease_));
        }
      }
      g.waiting = std::move(kept);
    } else if (g.session) {
      std::deque<OpPtr> ready = std::move(g.waiting);
      g.waiting.clear();
      for (OpPtr& op : ready) Submit(*g.session, std::move(op));
    } else if (!g.connecting) {
      // It serves again (or is down): the operations go where the map says.
      for (OpPtr& op : g.waiting) unstarted_.push_back(std::move(op));
      g.waiting.clear();
    }
  }
  for (const OpPtr& op : unstarted_) parked_ += op->park_until != absl::InfiniteFuture();
}

size_t ClusterClient::RunReady() {
  size_t n = 0;
  while (!ready_.empty()) {
    auto [op, s] = std::move(ready_.front());
    ready_.pop_front();
    client_internal::OpPool::Callbacks callbacks = ops_.Release(std::move(op), s);
    if (callbacks.on_get) callbacks.on_get(s);
    if (callbacks.on_done) callbacks.on_done(s);
    n++;
  }
  return n;
}

size_t ClusterClient::Poll(absl::Duration timeout) {
  size_t finished = 0;
  executor_->RunFinished();
  Unpark();
  std::deque<OpPtr> again = std::move(unstarted_);
  unstarted_.clear();
  for (OpPtr& op : again) Dispatch(std::move(op));
  finished += RunReady();
  // Callbacks may dispatch and so retire sessions; retired ones stay alive
  // (draining) until CloseDrained below.
  std::vector<RegionSession*> busy, idle;
  groups_.ForEachSession(
      [&](RegionSession& s) { (s.in_flight() > 0 ? busy : idle).push_back(&s); });
  for (RegionSession* s : busy) finished += s->Poll(absl::ZeroDuration());
  // The others too, now and then: a session renews its lease as it polls,
  // and one left unrenewed would be fenced for being idle.
  if (const absl::Time now = clock_(); now >= next_idle_poll_) {
    next_idle_poll_ = now + absl::Milliseconds(10);
    for (RegionSession* s : idle) finished += s->Poll(absl::ZeroDuration());
  }
  if (finished == 0 && timeout > absl::ZeroDuration()) {
    if (busy.empty()) {
      // Only background work (a connect, a map fetch), or a new map for
      // parked operations, can make progress. The executor is where this
      // thread waits, so that the simulation's waits are its own.
      if (executor_->pending() > 0 || parked_ > 0) {
        executor_->WaitFinished(parked_ > 0 ? std::min(timeout, absl::Milliseconds(2)) : timeout);
      }
    } else {
      // Every session's queue pair notifies the one channel. Background
      // work does not: while some is pending, wait in short steps.
      resources_->channel()->Wait(
          executor_->pending() > 0 ? std::min(timeout, absl::Milliseconds(1)) : timeout);
      for (RegionSession* s : busy) finished += s->Poll(absl::ZeroDuration());
    }
    finished += RunReady();
  }
  groups_.CloseDrained();
  return finished;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> client_internal::OpenCluster(const std::string& coordinator,
                                                                     const OpenOptions& options) {
  std::shared_ptr<MapSource> maps = options.map_source;
  if (maps == nullptr) {
    if (absl::StatusOr<std::vector<std::string>> list = ParseCoordinatorList(coordinator);
        !list.ok()) {
      return list.status();
    }
    maps = std::make_shared<CoordinatorMapSource>(coordinator, options.cluster_token);
  }
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<ClientResources> resources,
                       ClientResources::Create(options));
  auto c = std::make_unique<ClusterClient>(std::move(maps), options, std::move(resources));
  if (absl::Status s = c->Init(); !s.ok()) return s;
  return std::unique_ptr<Client>(std::move(c));
}

absl::StatusOr<std::unique_ptr<Client>> Client::OpenCluster(const std::string& coordinator,
                                                            const ClientOptions& options) {
  return client_internal::OpenCluster(coordinator, client_internal::OpenOptions(options));
}

}  // namespace rkv
