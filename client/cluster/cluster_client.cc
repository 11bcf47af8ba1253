// The cluster client: one session per replica group (with one copy per
// key, per server), chosen per key by rendezvous hashing of the group ids
// over the coordinator's map, which a background thread keeps current. A
// group's session reaches all of its copies, the primary first. The
// sessions share one fabric, one scratch memory and one slot cache
// (ClientResources).
#include "client/cluster/cluster_client.h"

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cluster/background_worker.h"
#include "client/protocol/outcome.h"
#include "client/region/region_client.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/status.h"
#include "proto/coordinator_stub.h"
#include "rkv/client.h"

namespace rkv {
namespace {

class ClusterClient final : public Client {
 public:
  ClusterClient(const std::string& coordinator, const client_internal::OpenOptions& options)
      : options_(options), coord_(coordinator, options.cluster_token) {}

  ~ClusterClient() override {
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      stopping_ = true;
      if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
    }
    if (watcher_.joinable()) watcher_.join();
    background_.reset();  // Its jobs use coord_ and resources_.
    // Every operation completes once: the sessions cancel theirs as they
    // close, and this client cancels those it holds.
    const absl::Status closed = absl::CancelledError("the client was closed");
    for (auto& [id, s] : groups_) {
      for (OpPtr& op : s.waiting) Fail(std::move(op), closed);
    }
    groups_.clear();
    draining_.clear();
    for (std::deque<OpPtr>* q : {&retries_, &redispatch_}) {
      for (OpPtr& op : *q) Fail(std::move(op), closed);
      q->clear();
    }
    RunReady();
  }

  absl::Status Init() {
    RKV_ASSIGN_OR_RETURN(resources_, client_internal::ClientResources::Create(options_));
    proto::ClusterMap map;
    if (absl::Status s = coord_.GetClusterMap(&map); !s.ok()) return s;
    Adopt(map);
    background_ = std::make_unique<client_internal::BackgroundWorker>(kBackgroundThreads);
    watcher_ = std::thread([this] { WatchLoop(); });
    return absl::OkStatus();
  }

  void GetAsync(absl::string_view key, GetCallback done) override {
    Dispatch(NewOp(OpType::kGet, key, "", std::move(done), nullptr));
  }
  void PutAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    Dispatch(NewOp(OpType::kPut, key, value, nullptr, std::move(done)));
  }
  void InsertAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    Dispatch(NewOp(OpType::kInsert, key, value, nullptr, std::move(done)));
  }
  void DeleteAsync(absl::string_view key, DoneCallback done) override {
    Dispatch(NewOp(OpType::kDelete, key, "", nullptr, std::move(done)));
  }

  size_t Poll(absl::Duration timeout) override;

  size_t in_flight() const override {
    size_t n = ready_.size() + retries_.size() + redispatch_.size();
    for (const auto& [id, s] : groups_) n += s.waiting.size();
    ForEachClient([&n](Client& c) { n += c.in_flight(); });
    return n;
  }

  OpCosts costs(OpType type) const override {
    OpCosts c = retired_costs_[static_cast<int>(type)];
    ForEachClient([&](Client& client) { Add(c, client.costs(type)); });
    return c;
  }

 private:
  // Connects and map fetches; two, so that a connect to a server that does
  // not answer (bounded by its connect timeout) does not hold up the map.
  static constexpr int kBackgroundThreads = 2;
  // How long one fetch of the map may take.
  static constexpr absl::Duration kFetchTimeout = absl::Seconds(2);

  struct Op {
    OpType type;
    std::string key, value;
    GetCallback on_get;
    DoneCallback on_done;
    bool retried = false;
    uint64_t needs_fetch = 0;  // A retry waits for this map fetch to end.
    // Parked while its group reconfigures: failed if it does not serve by then.
    absl::Time park_until = absl::InfiniteFuture();
  };
  // Operations are reused (their strings keep their capacity), so that one
  // costs no allocation here; a session's callback names its operation by
  // pointer and takes ownership back when it runs (exactly once).
  using OpPtr = std::unique_ptr<Op>;
  OpPtr NewOp(OpType type, absl::string_view key, absl::string_view value, GetCallback on_get,
              DoneCallback on_done) {
    OpPtr op;
    if (idle_ops_.empty()) {
      op = std::make_unique<Op>();
    } else {
      op = std::move(idle_ops_.back());
      idle_ops_.pop_back();
    }
    op->type = type;
    op->key.assign(key.data(), key.size());
    op->value.assign(value.data(), value.size());
    op->on_get = std::move(on_get);
    op->on_done = std::move(on_done);
    op->retried = false;
    op->needs_fetch = 0;
    op->park_until = absl::InfiniteFuture();
    return op;
  }
  void Recycle(OpPtr op) {
    op->on_get = nullptr;
    op->on_done = nullptr;
    if (idle_ops_.size() < options_.max_outstanding) idle_ops_.push_back(std::move(op));
  }
  struct Group {
    proto::ReplicaGroup info;
    std::vector<proto::ServerInfo> members;  // In the group's order, the primary first.
    std::unique_ptr<Client> client;          // Its session, once connected.
    bool connecting = false;
    std::deque<OpPtr> waiting;  // For the session.
  };

  static void Add(OpCosts& a, const OpCosts& b) {
    a.ops += b.ops;
    a.round_trips += b.round_trips;
    a.requests += b.requests;
    a.bytes += b.bytes;
    a.retries += b.retries;
  }
  static const absl::Status& StatusOf(const absl::Status& s) { return s; }
  static const absl::Status& StatusOf(const absl::StatusOr<std::string>& s) { return s.status(); }
  // The same copies, reached the same way: a session may go on.
  static bool SameCopies(const Group& a, const Group& b) {
    if (a.info.config() != b.info.config() || a.members.size() != b.members.size()) return false;
    for (size_t i = 0; i < a.members.size(); ++i) {
      const proto::RegionDescriptor& x = a.members[i].region();
      const proto::RegionDescriptor& y = b.members[i].region();
      if (a.members[i].id() != b.members[i].id() || x.generation() != y.generation() ||
          x.rkey() != y.rkey()) {
        return false;
      }
    }
    return true;
  }
  // Why a group's keys cannot be served now; OK when they can.
  static absl::Status Serves(const Group& g);

  // Runs the completions Fail queued; returns how many.
  size_t RunReady() {
    size_t n = 0;
    while (!ready_.empty()) {
      auto [op, s] = std::move(ready_.front());
      ready_.pop_front();
      GetCallback on_get = std::move(op->on_get);
      DoneCallback on_done = std::move(op->on_done);
      Recycle(std::move(op));
      if (on_get) on_get(s);
      if (on_done) on_done(s);
      n++;
    }
    return n;
  }
  // Completes `op` with `s` inside the next Poll().
  void Fail(OpPtr op, absl::Status s) { ready_.push_back({std::move(op), std::move(s)}); }

  // Rendezvous hashing: the group with the highest hash of (id, key).
  Group* Route(const std::string& key) {
    Group* best = nullptr;
    uint64_t best_score = 0;
    for (auto& [id, s] : groups_) {
      if (s.info.forming()) continue;  // Places no keys until it serves.
      const uint64_t score = XXH64(key, XXH64(id));
      if (best == nullptr || score > best_score) {
        best = &s;
        best_score = score;
      }
    }
    return best;
  }

  void Dispatch(OpPtr op);
  // Operations parked on reconfiguring groups: dispatched again once their
  // group serves, failed once they waited too long.
  void Unpark();
  // Hands `op` to session `c`, retrying a failure where that is safe.
  void Submit(Client& c, OpPtr op);
  // A session finished `op` with `result`: retries it where that is safe,
  // or runs its callback.
  template <typename Result>
  void OnDone(Op* op, Result result);
  void Connect(Group& g);
  void OnConnected(const Group& at, absl::StatusOr<std::unique_ptr<Client>> c);
  // Fetches the map in the background; retries wait for the fetch.
  uint64_t FetchMap();
  void OnFetched(uint64_t fetch, absl::StatusOr<proto::ClusterMap> map);
  void Adopt(const proto::ClusterMap& map);
  void SyncMap();
  void WatchLoop();
  // Calls f(Client&) for the sessions of the map's servers, then for those
  // draining.
  template <typename F>
  void ForEachClient(F f) const {
    for (const auto& [id, s] : groups_) {
      if (s.client) f(*s.client);
    }
    for (const auto& c : draining_) f(*c);
  }
  // A group's copies are gone or changed (a server restarted, the group
  // reconfigured, or left the map): its session drains, polled until its operations have completed
  // (failed, mostly, and retried where that is safe), and only then closes. Operations that waited
  // for it to connect never started: they go where the new map says.
  void Retire(Group& s) {
    if (s.client) draining_.push_back(std::move(s.client));
    for (OpPtr& op : s.waiting) redispatch_.push_back(std::move(op));
    s.waiting.clear();
  }
  // Closes the draining sessions that have nothing left in flight.
  void CloseDrained() {
    std::erase_if(draining_, [this](const std::unique_ptr<Client>& c) {
      if (c->in_flight() > 0) return false;
      for (int t = 0; t < kOpTypes; ++t) Add(retired_costs_[t], c->costs(static_cast<OpType>(t)));
      return true;
    });
  }

  const client_internal::OpenOptions options_;
  std::shared_ptr<client_internal::ClientResources> resources_;
  CoordinatorStub coord_;
  uint64_t epoch_ = 0;
  bool warned_epoch_ = false;
  std::map<std::string, Group> groups_;
  absl::Duration lease_ = absl::Seconds(3);  // The map's.
  size_t parked_ = 0;                        // Operations waiting for a group to serve again.
  std::vector<std::unique_ptr<Client>> draining_;
  std::deque<std::pair<OpPtr, absl::Status>> ready_;  // Failed, callbacks to run.
  std::deque<OpPtr> retries_;                         // In order of needs_fetch.
  std::deque<OpPtr> redispatch_;                      // Never started; dispatched in the next Poll.
  std::vector<OpPtr> idle_ops_;
  uint64_t fetches_started_ = 0;
  uint64_t fetches_done_ = 0;
  bool fetch_again_ = false;  // A retry needs a fetch that starts later.
  OpCosts retired_costs_[kOpTypes];
  std::unique_ptr<client_internal::BackgroundWorker> background_;

  // Written by the watcher thread, taken by the client's thread.
  std::mutex watch_mu_;
  std::unique_ptr<proto::ClusterMap> newer_map_;
  grpc::ClientContext* watch_ctx_ = nullptr;
  bool stopping_ = false;
  std::thread watcher_;
};

void ClusterClient::Adopt(const proto::ClusterMap& map) {
  if (map.epoch() < epoch_) {  // Never go back to an older map.
    if (!warned_epoch_) {
      RKV_LOG(WARNING) << "the coordinator's map went back from epoch " << epoch_ << " to "
                       << map.epoch() << " (kvcoord restarted without --state_file?); "
                       << "keeping the map of epoch " << epoch_ << " until a newer one comes";
      warned_epoch_ = true;
    }
    return;
  }
  epoch_ = map.epoch();
  if (map.lease_ms() > 0) lease_ = absl::Milliseconds(map.lease_ms());
  std::map<std::string, proto::ServerInfo> servers;
  for (const proto::ServerInfo& info : map.servers()) servers[info.id()] = info;
  std::vector<proto::ReplicaGroup> groups(map.groups().begin(), map.groups().end());
  if (groups.empty()) {
    // A coordinator that predates replica groups: each server its own.
    for (const proto::ServerInfo& info : map.servers()) {
      proto::ReplicaGroup& g = groups.emplace_back();
      g.set_id(info.id());
      g.add_members(info.id());
      g.set_state(info.state() == proto::SERVER_STATE_UP ? proto::GROUP_STATE_SERVING
                                                         : proto::GROUP_STATE_LOST);
    }
  }
  std::map<std::string, Group> next;
  for (proto::ReplicaGroup& info : groups) {
    Group& g = next[info.id()];
    g.info = std::move(info);
    for (const std::string& m : g.info.members()) {
      auto it = servers.find(m);
      if (it != servers.end()) g.members.push_back(it->second);
    }
    auto old = groups_.find(g.info.id());
    if (old == groups_.end()) continue;
    // Keep the session while its copies are the same ones.
    if (SameCopies(old->second, g)) {
      g.client = std::move(old->second.client);
      g.connecting = old->second.connecting;
      g.waiting = std::move(old->second.waiting);
    } else {
      Retire(old->second);
    }
    groups_.erase(old);
  }
  for (auto& [id, s] : groups_) Retire(s);
  groups_ = std::move(next);
}

absl::Status ClusterClient::Serves(const Group& g) {
  if (g.info.members_size() == 1 && g.info.members(0) == g.info.id()) {
    // One copy per key: the group is its server.
    if (g.info.state() == proto::GROUP_STATE_SERVING && !g.members.empty() &&
        g.members[0].state() == proto::SERVER_STATE_UP) {
      return absl::OkStatus();
    }
    return absl::UnavailableError(
        absl::StrCat("server ", g.info.id(), ", which holds this key, is down"));
  }
  const std::string members = absl::StrJoin(g.info.members(), ",");
  switch (g.info.state()) {
    case proto::GROUP_STATE_SERVING:
      if (g.members.size() == static_cast<size_t>(g.info.members_size())) return absl::OkStatus();
      break;
    case proto::GROUP_STATE_RECONFIGURING:
      return absl::UnavailableError(absl::StrCat(
          "group ", g.info.id(), ", which holds this key, is reconfiguring (copies on ", members,
          " being made to agree); try again shortly"));
    default:
      break;
  }
  return absl::UnavailableError(absl::StrCat(
      "group ", g.info.id(), ", which holds this key, has no copy up (servers ", members, ")"));
}

void ClusterClient::SyncMap() {
  std::unique_ptr<proto::ClusterMap> map;
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    map = std::move(newer_map_);
  }
  if (map) Adopt(*map);
}

void ClusterClient::WatchLoop() {
  while (true) {
    grpc::ClientContext ctx;
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      if (stopping_) return;
      watch_ctx_ = &ctx;
    }
    if (!options_.cluster_token.empty()) ctx.AddMetadata("rkv-token", options_.cluster_token);
    proto::WatchClusterMapRequest req;
    std::unique_ptr<grpc::ClientReader<proto::ClusterMap>> reader =
        coord_.stub().WatchClusterMap(&ctx, req);
    proto::ClusterMap map;
    while (reader->Read(&map)) {
      std::lock_guard<std::mutex> lock(watch_mu_);
      newer_map_ = std::make_unique<proto::ClusterMap>(map);
    }
    (void)reader->Finish();
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      watch_ctx_ = nullptr;
      if (stopping_) return;
    }
    // The coordinator went away: keep the cached map and try again soon.
    absl::SleepFor(absl::Milliseconds(300));
  }
}

void ClusterClient::Dispatch(OpPtr op) {
  SyncMap();
  Group* s = Route(op->key);
  if (s == nullptr)
    return Fail(std::move(op), absl::UnavailableError("the cluster map has no servers"));
  if (s->info.state() == proto::GROUP_STATE_RECONFIGURING) {
    // Its copies are being made to agree, which takes about a lease once
    // it began: the operation waits for that rather than fail at once.
    if (op->park_until == absl::InfiniteFuture()) op->park_until = absl::Now() + 2 * lease_;
    s->waiting.push_back(std::move(op));
    parked_++;
    return;
  }
  if (absl::Status serves = Serves(*s); !serves.ok()) return Fail(std::move(op), std::move(serves));
  if (s->client) return Submit(*s->client, std::move(op));
  s->waiting.push_back(std::move(op));
  if (!s->connecting) Connect(*s);
}

void ClusterClient::Connect(Group& g) {
  g.connecting = true;
  std::vector<fabric::RemoteRegion> copies;
  for (const proto::ServerInfo& m : g.members) {
    const proto::RegionDescriptor& r = m.region();
    copies.push_back(
        {{r.endpoint().address(), options_.cluster_token}, r.base_address(), r.length(), r.rkey()});
  }
  auto result = std::make_shared<absl::StatusOr<std::unique_ptr<Client>>>();
  background_->Run(
      [result, copies = std::move(copies), options = options_, resources = resources_] {
        *result = client_internal::OpenReplicatedSession(copies, options, {}, resources);
      },
      [this, result, info = g.info, members = g.members] {
        Group at;
        at.info = info;
        at.members = members;
        OnConnected(at, std::move(*result));
      });
}

void ClusterClient::OnConnected(const Group& at, absl::StatusOr<std::unique_ptr<Client>> c) {
  auto it = groups_.find(at.info.id());
  // The map moved on while connecting, or the group changed and another
  // connect won: the session is of no use (it holds no operations), and
  // those that waited for it went elsewhere.
  if (it == groups_.end() || !SameCopies(it->second, at) || it->second.client) return;
  Group& s = it->second;
  s.connecting = false;
  std::deque<OpPtr> waiting = std::move(s.waiting);
  s.waiting.clear();
  if (!c.ok()) {
    const absl::Status failed =
        absl::UnavailableError(absl::StrCat(at.info.members_size() == 1 ? "server " : "group ",
                                            at.info.id(), ": ", c.status().message()));
    for (OpPtr& op : waiting) Fail(std::move(op), failed);
    return;
  }
  s.client = std::move(c).value();
  for (OpPtr& op : waiting) Submit(*s.client, std::move(op));
}

uint64_t ClusterClient::FetchMap() {
  if (fetches_started_ > fetches_done_) {
    // The fetch under way may have begun before what failed: one more.
    fetch_again_ = true;
    return fetches_started_ + 1;
  }
  const uint64_t fetch = ++fetches_started_;
  auto result = std::make_shared<absl::StatusOr<proto::ClusterMap>>();
  background_->Run(
      [this, result] {
        proto::ClusterMap map;
        absl::Status s = coord_.GetClusterMap(&map, kFetchTimeout);
        *result = s.ok() ? absl::StatusOr<proto::ClusterMap>(std::move(map)) : s;
      },
      [this, fetch, result] { OnFetched(fetch, std::move(*result)); });
  return fetch;
}

void ClusterClient::OnFetched(uint64_t fetch, absl::StatusOr<proto::ClusterMap> map) {
  fetches_done_ = fetch;
  if (map.ok()) Adopt(*map);  // A failed fetch: retry on the map there is.
  if (fetch_again_) {
    fetch_again_ = false;
    FetchMap();
  }
  while (!retries_.empty() && retries_.front()->needs_fetch <= fetches_done_) {
    OpPtr op = std::move(retries_.front());
    retries_.pop_front();
    Dispatch(std::move(op));
  }
}

void ClusterClient::Submit(Client& c, OpPtr owned) {
  Op* op = owned.release();  // The callback takes it back.
  switch (op->type) {
    case OpType::kGet:
      c.GetAsync(op->key, [this, op](absl::StatusOr<std::string> v) { OnDone(op, std::move(v)); });
      break;
    case OpType::kPut:
      c.PutAsync(op->key, op->value, [this, op](absl::Status st) { OnDone(op, std::move(st)); });
      break;
    case OpType::kInsert:
      c.InsertAsync(op->key, op->value, [this, op](absl::Status st) { OnDone(op, std::move(st)); });
      break;
    case OpType::kDelete:
      c.DeleteAsync(op->key, [this, op](absl::Status st) { OnDone(op, std::move(st)); });
      break;
  }
}

template <typename Result>
void ClusterClient::OnDone(Op* raw, Result result) {
  OpPtr op(raw);
  // A failure that may come from a stale map (the server restarted with a
  // new rkey) is retried once, on a freshly fetched map: a GET always, a
  // write only if its first attempt cannot have taken effect. A write
  // whose CAS went out may still take effect later (a claim left pending
  // is committed by the next writer of the key that finds it), so a retry
  // that succeeded would be followed by the first attempt's write.
  if (!result.ok()) {
    const absl::Status& st = StatusOf(result);
    if (absl::IsUnavailable(st) && !op->retried &&
        (op->type == OpType::kGet || !client_internal::OutcomeUnknown(st))) {
      op->retried = true;
      op->needs_fetch = FetchMap();
      retries_.push_back(std::move(op));
      return;
    }
  }
  GetCallback on_get = std::move(op->on_get);
  DoneCallback on_done = std::move(op->on_done);
  Recycle(std::move(op));
  if constexpr (std::is_same_v<Result, absl::Status>) {
    on_done(std::move(result));
  } else {
    on_get(std::move(result));
  }
}

void ClusterClient::Unpark() {
  if (parked_ == 0) return;
  SyncMap();
  const absl::Time now = absl::Now();
  parked_ = 0;
  for (auto& [id, g] : groups_) {
    if (g.waiting.empty()) continue;
    if (g.info.state() == proto::GROUP_STATE_RECONFIGURING) {
      // Still reconfiguring: fail those that waited long enough.
      std::deque<OpPtr> kept;
      for (OpPtr& op : g.waiting) {
        if (op->park_until > now) {
          parked_ += op->park_until != absl::InfiniteFuture();
          kept.push_back(std::move(op));
        } else {
          Fail(std::move(op),
               absl::UnavailableError(absl::StrCat(
                   "group ", id, ", which holds this key, is still reconfiguring after ",
                   absl::FormatDuration(2 * lease_))));
        }
      }
      g.waiting = std::move(kept);
    } else if (g.client) {
      std::deque<OpPtr> ready = std::move(g.waiting);
      g.waiting.clear();
      for (OpPtr& op : ready) Submit(*g.client, std::move(op));
    } else if (!g.connecting) {
      // It serves again (or is down): the operations go where the map says.
      for (OpPtr& op : g.waiting) redispatch_.push_back(std::move(op));
      g.waiting.clear();
    }
  }
  for (const OpPtr& op : redispatch_) parked_ += op->park_until != absl::InfiniteFuture();
}

size_t ClusterClient::Poll(absl::Duration timeout) {
  size_t finished = 0;
  background_->RunFinished();
  Unpark();
  std::deque<OpPtr> again = std::move(redispatch_);
  redispatch_.clear();
  for (OpPtr& op : again) Dispatch(std::move(op));
  finished += RunReady();
  // Callbacks may dispatch and so retire sessions; retired ones stay alive
  // (draining) until CloseDrained below.
  std::vector<Client*> busy;
  ForEachClient([&busy](Client& c) {
    if (c.in_flight() > 0) busy.push_back(&c);
  });
  for (Client* c : busy) finished += c->Poll(absl::ZeroDuration());
  if (finished == 0 && timeout > absl::ZeroDuration()) {
    if (busy.empty()) {
      // Only background work (a connect, a map fetch), or a new map for
      // parked operations, can make progress.
      if (background_->pending() > 0) {
        background_->WaitFinished(parked_ > 0 ? std::min(timeout, absl::Milliseconds(2)) : timeout);
      } else if (parked_ > 0) {
        absl::SleepFor(std::min(timeout, absl::Milliseconds(2)));
      }
    } else {
      // Every session's queue pair notifies the one channel. Background
      // work does not: while some is pending, wait in short steps.
      resources_->channel()->Wait(
          background_->pending() > 0 ? std::min(timeout, absl::Milliseconds(1)) : timeout);
      for (Client* c : busy) finished += c->Poll(absl::ZeroDuration());
    }
    finished += RunReady();
  }
  CloseDrained();
  return finished;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> client_internal::OpenCluster(const std::string& coordinator,
                                                                     const OpenOptions& options) {
  auto c = std::make_unique<ClusterClient>(coordinator, options);
  if (absl::Status s = c->Init(); !s.ok()) return s;
  return std::unique_ptr<Client>(std::move(c));
}

absl::StatusOr<std::unique_ptr<Client>> Client::OpenCluster(const std::string& coordinator,
                                                            const ClientOptions& options) {
  return client_internal::OpenCluster(coordinator, options);
}

}  // namespace rkv
