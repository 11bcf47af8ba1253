// The cluster client: one session per server, chosen per key by rendezvous
// hashing over the coordinator's map, which a background thread keeps
// current. The sessions share one fabric, one scratch memory and one slot
// cache (ClientResources).
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client_resources.h"
#include "client/outcome.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/status.h"
#include "proto/coordinator_stub.h"
#include "rkv/client.h"

namespace rkv {
namespace {

class ClusterClient final : public Client {
 public:
  ClusterClient(const std::string& coordinator, const ClientOptions& options)
      : options_(options), coord_(coordinator, options.cluster_token) {}

  ~ClusterClient() override {
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      stopping_ = true;
      if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
    }
    if (watcher_.joinable()) watcher_.join();
    // Every operation completes once: the region clients cancel theirs as
    // they close, and so does this one.
    servers_.clear();
    draining_.clear();
    for (Op& op : retries_) Fail(std::move(op), absl::CancelledError("the client was closed"));
    retries_.clear();
    RunReady();
  }

  absl::Status Init() {
    RKV_ASSIGN_OR_RETURN(resources_, client_internal::ClientResources::Create(options_));
    proto::ClusterMap map;
    if (absl::Status s = coord_.GetClusterMap(&map); !s.ok()) return s;
    Adopt(map);
    watcher_ = std::thread([this] { WatchLoop(); });
    return absl::OkStatus();
  }

  void GetAsync(absl::string_view key, GetCallback done) override {
    Dispatch({OpType::kGet, std::string(key), "", std::move(done), nullptr, false});
  }
  void PutAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    Dispatch({OpType::kPut, std::string(key), std::string(value), nullptr, std::move(done), false});
  }
  void InsertAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    Dispatch({OpType::kInsert, std::string(key), std::string(value), nullptr, std::move(done),
              false});
  }
  void DeleteAsync(absl::string_view key, DoneCallback done) override {
    Dispatch({OpType::kDelete, std::string(key), "", nullptr, std::move(done), false});
  }

  size_t Poll(absl::Duration timeout) override;

  size_t in_flight() const override {
    size_t n = ready_.size() + retries_.size();
    ForEachClient([&n](Client& c) { n += c.in_flight(); });
    return n;
  }

  OpCosts costs(OpType type) const override {
    OpCosts c = retired_costs_[static_cast<int>(type)];
    ForEachClient([&](Client& client) { Add(c, client.costs(type)); });
    return c;
  }

  fabric::QueuePairCounters connection_counters() const override {
    fabric::QueuePairCounters c = retired_counters_;
    ForEachClient([&c](Client& client) { Add(c, client.connection_counters()); });
    return c;
  }

 private:
  struct Op {
    OpType type;
    std::string key, value;
    GetCallback on_get;
    DoneCallback on_done;
    bool retried;
  };
  struct Server {
    proto::ServerInfo info;
    std::unique_ptr<Client> client;  // Connected lazily.
  };

  static void Add(OpCosts& a, const OpCosts& b) {
    a.ops += b.ops;
    a.round_trips += b.round_trips;
    a.requests += b.requests;
    a.bytes += b.bytes;
    a.retries += b.retries;
  }
  static void Add(fabric::QueuePairCounters& a, const fabric::QueuePairCounters& b) {
    a.doorbells += b.doorbells;
    a.requests += b.requests;
    a.bytes += b.bytes;
    a.error_completions += b.error_completions;
  }

  // Runs the completions Fail queued; returns how many.
  size_t RunReady() {
    size_t n = 0;
    while (!ready_.empty()) {
      auto f = std::move(ready_.front());
      ready_.pop_front();
      f();
      n++;
    }
    return n;
  }
  // Completes `op` with `s` inside the next Poll().
  void Fail(Op op, absl::Status s) {
    ready_.push_back([op = std::move(op), s = std::move(s)]() mutable {
      if (op.on_get) op.on_get(s);
      if (op.on_done) op.on_done(s);
    });
  }

  // Rendezvous hashing: the server with the highest hash of (id, key).
  Server* Route(const std::string& key) {
    Server* best = nullptr;
    uint64_t best_score = 0;
    for (auto& [id, s] : servers_) {
      const uint64_t score = XXH64(key, XXH64(id));
      if (best == nullptr || score > best_score) {
        best = &s;
        best_score = score;
      }
    }
    return best;
  }

  void Dispatch(Op op);
  void Adopt(const proto::ClusterMap& map);
  void SyncMap();
  void WatchLoop();
  // Calls f(Client&) for the region clients of the map's servers, then for
  // those draining.
  template <typename F>
  void ForEachClient(F f) const {
    for (const auto& [id, s] : servers_) {
      if (s.client) f(*s.client);
    }
    for (const auto& c : draining_) f(*c);
  }
  // A server's region is gone (restarted, or left the map): its client
  // drains, polled until its operations have completed (failed, mostly,
  // and retried where that is safe), and only then closes.
  void Retire(Server& s) {
    if (s.client) draining_.push_back(std::move(s.client));
  }
  // Closes the draining clients that have nothing left in flight.
  void CloseDrained() {
    std::erase_if(draining_, [this](const std::unique_ptr<Client>& c) {
      if (c->in_flight() > 0) return false;
      for (int t = 0; t < kOpTypes; ++t) Add(retired_costs_[t], c->costs(static_cast<OpType>(t)));
      Add(retired_counters_, c->connection_counters());
      return true;
    });
  }

  const ClientOptions options_;
  std::shared_ptr<client_internal::ClientResources> resources_;
  CoordinatorStub coord_;
  uint64_t epoch_ = 0;
  bool warned_epoch_ = false;
  std::map<std::string, Server> servers_;
  std::vector<std::unique_ptr<Client>> draining_;
  std::deque<std::function<void()>> ready_;
  std::deque<Op> retries_;
  OpCosts retired_costs_[kOpTypes];
  fabric::QueuePairCounters retired_counters_;

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
  std::map<std::string, Server> next;
  for (const proto::ServerInfo& info : map.servers()) {
    Server& s = next[info.id()];
    auto old = servers_.find(info.id());
    if (old != servers_.end()) {
      // Keep the connection unless the region was registered anew.
      if (old->second.info.region().generation() == info.region().generation() &&
          old->second.info.region().rkey() == info.region().rkey()) {
        s.client = std::move(old->second.client);
      } else {
        Retire(old->second);
      }
    }
    s.info = info;
  }
  for (auto& [id, s] : servers_) Retire(s);
  servers_ = std::move(next);
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

void ClusterClient::Dispatch(Op op) {
  SyncMap();
  Server* s = Route(op.key);
  if (s == nullptr) return Fail(std::move(op), absl::UnavailableError("the cluster map has no servers"));
  if (s->info.state() != proto::SERVER_STATE_UP) {
    return Fail(std::move(op), absl::UnavailableError(absl::StrCat(
                                   "server ", s->info.id(), ", which holds this key, is down")));
  }
  if (!s->client) {
    const proto::RegionDescriptor& r = s->info.region();
    fabric::RemoteRegion region{{r.endpoint().address(), options_.cluster_token},
                                r.base_address(), r.length(), r.rkey()};
    absl::StatusOr<std::unique_ptr<Client>> c =
        client_internal::OpenSession(region, options_, {}, resources_);
    if (!c.ok()) {
      return Fail(std::move(op), absl::UnavailableError(absl::StrCat(
                                     "server ", s->info.id(), ": ", c.status().message())));
    }
    s->client = std::move(c).value();
  }
  // A failure that may come from a stale map (the server restarted with a
  // new rkey) is retried once after refreshing the map: a GET or PUT
  // always (doing either twice is doing it once, later), an INSERT or
  // DELETE only if its first attempt cannot have taken effect.
  auto retry = [this, op](const absl::Status& st) mutable {
    if (!absl::IsUnavailable(st) || op.retried) return false;
    const bool idempotent = op.type == OpType::kGet || op.type == OpType::kPut;
    if (!idempotent && client_internal::OutcomeUnknown(st)) return false;
    op.retried = true;
    retries_.push_back(std::move(op));
    return true;
  };
  Client& c = *s->client;
  switch (op.type) {
    case OpType::kGet:
      c.GetAsync(op.key, [retry, done = op.on_get](absl::StatusOr<std::string> v) mutable {
        if (!v.ok() && retry(v.status())) return;
        done(std::move(v));
      });
      break;
    case OpType::kPut:
    case OpType::kInsert: {
      auto cb = [retry, done = op.on_done](absl::Status st) mutable {
        if (!st.ok() && retry(st)) return;
        done(std::move(st));
      };
      if (op.type == OpType::kPut) {
        c.PutAsync(op.key, op.value, std::move(cb));
      } else {
        c.InsertAsync(op.key, op.value, std::move(cb));
      }
      break;
    }
    case OpType::kDelete:
      c.DeleteAsync(op.key, [retry, done = op.on_done](absl::Status st) mutable {
        if (!st.ok() && retry(st)) return;
        done(std::move(st));
      });
      break;
  }
}

size_t ClusterClient::Poll(absl::Duration timeout) {
  size_t finished = 0;
  if (!retries_.empty()) {
    proto::ClusterMap map;
    if (coord_.GetClusterMap(&map, absl::Seconds(2)).ok()) Adopt(map);
    std::deque<Op> again = std::move(retries_);
    retries_.clear();
    for (Op& op : again) Dispatch(std::move(op));
  }
  finished += RunReady();
  // Callbacks may dispatch and so retire clients; retired ones stay alive
  // (draining) until CloseDrained below.
  std::vector<Client*> busy;
  ForEachClient([&busy](Client& c) {
    if (c.in_flight() > 0) busy.push_back(&c);
  });
  for (Client* c : busy) finished += c->Poll(absl::ZeroDuration());
  if (finished == 0 && timeout > absl::ZeroDuration() && !busy.empty()) {
    if (busy.size() == 1) {
      finished += busy[0]->Poll(timeout);
    } else {
      absl::SleepFor(std::min(timeout, absl::Microseconds(20)));
    }
  }
  CloseDrained();
  return finished;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::OpenCluster(const std::string& coordinator,
                                                            const ClientOptions& options) {
  auto c = std::make_unique<ClusterClient>(coordinator, options);
  if (absl::Status s = c->Init(); !s.ok()) return s;
  return std::unique_ptr<Client>(std::move(c));
}

}  // namespace rkv
