// A replicated cluster in one process, over many seeds, running the code
// users run: each seed, in one thread, on simulated time,
// - kvservers: a real RegionServer and kvserver's real membership core
//   (server/kvserver/agent_core.h), which registers, renews, fences itself
//   and carries pushes out as ordered;
// - two or three real coordinators (server/kvcoord/coordinator.h),
//   each over a real EtcdStateStore over one simulated etcd
//   (tests/server/kvcoord/sim_etcd.h): one leads, the others stand by;
// - clients through the public rkv::Client API on the real cluster client
//   (client/cluster/), fed the map of whichever coordinator they reach.
// What is simulated around them: every node's clock (true time scaled by
// a rate within ±5 %, the bound etcd_state_store.h states), the control
// network between servers, coordinators and clients (each request and
// answer a message, delivered after a drawn delay, maybe dropped or
// duplicated, cut by partitions, one-way too), the data path (the
// deterministic fabric, common/fabric/sim/), and etcd. The servers try the
// coordinators in turn as CoordinatorStub::Call does.
//
// Faults are drawn per seed: servers lost with their memory (and back
// blank), stopped (they deregister) or paused past their lease, a second
// paused while its group reconfigures, a reconfiguration's pusher paused
// mid-push, a coordinator killed or paused, etcd losing its leader or its
// quorum, partitions, messages delayed, dropped and duplicated, clocks
// fast or slow, clients paused past their session's lease or killed,
// requests to the servers delayed, failed or their connection broken
// (fabric::InjectFaults). A fifth of the seeds keep one copy. Every seed's
// history is checked for linearizability, every operation completes
// exactly once, reads of every key once the faults are over agree with the
// history (no acknowledged write lost), and the coordinators then agree on
// one leader.
//
// RKV_SIM_SEEDS=N runs seeds 1..N; RKV_SIM_SEED=S reruns seed S alone.
// A failing seed prints the command that reruns it and the end of its
// trace (who sent what to whom, when, and which fault); RKV_SIM_TRACE=1
// prints all of it.
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/cluster/cluster_client.h"
#include "client/protocol/outcome.h"
#include "common/fabric/faulty_fabric.h"
#include "common/fabric/sim/sim_network.h"
#include "common/logging.h"
#include "gtest/gtest.h"
#include "proto/coordinator_stub.h"
#include "server/kvcoord/coordinator.h"
#include "server/kvcoord/etcd_state_store.h"
#include "server/kvserver/agent_core.h"
#include "server/kvserver/region_server.h"
#include "tests/client/cluster/sim_cluster_parts.h"
#include "tests/linearizability/checker.h"
#include "tests/linearizability/random_ops.h"
#include "tests/server/kvcoord/sim_etcd.h"

namespace rkv::testing {
namespace {

namespace lin = ::rkv::linearizability;
using server::testing::SimEtcd;

constexpr absl::Duration kLease = absl::Milliseconds(600);
// Any two clocks measure a time within 1.05 / 0.95 of each other, under
// the 1 / 0.9 the leadership's margin allows.
constexpr double kRateSpread = 0.05;
constexpr uint64_t kRegionBytes = 1 << 20;
constexpr absl::Duration kClientLease = absl::Seconds(2);

absl::Time Origin() { return absl::UnixEpoch() + absl::Hours(1); }
std::string At(absl::Time t) {
  return absl::StrFormat("%8.4fs", absl::ToDoubleSeconds(t - Origin()));
}

// A node's clock: true time at its rate, from an offset of its own.
struct NodeClock {
  double rate = 1;
  absl::Duration offset;
  absl::Time Local(absl::Time t) const { return Origin() + offset + (t - Origin()) * rate; }
  // The true time a local duration takes.
  absl::Duration True(absl::Duration d) const { return d / rate; }
};

struct Scenario {
  uint32_t replicas = 2;
  int servers = 3;  // One more than the copies: a spare.
  int coordinators = 2;
  int clients = 3;
  int ops_per_client = 50;
  int outstanding = 2;
  lin::OpMix mix;
};

class ClusterSim;

// A kvserver: its region and its agent's core, gone while it is down.
struct Srv {
  std::string id;
  NodeClock clock;
  int incarnation = 0;
  std::unique_ptr<fabric::Fabric> fabric;  // Goes after the region.
  std::unique_ptr<server::RegionServer> region;
  std::unique_ptr<server::AgentCore> core;
  absl::Time paused_until = absl::InfinitePast();
  absl::Time back_at = absl::InfiniteFuture();  // Down: when it starts again, blank.
  absl::Time next_lease_check = absl::InfinitePast();
  bool pause_after_push = false;  // Paused mid-push: once its step returns.
  // The exchange under way, as CoordinatorStub::Call makes it.
  struct Exchange {
    bool active = false;
    uint64_t attempt = 0;  // Of the try under way; answers of others are late.
    server::AgentRequest request;
    size_t tried = 0;
    absl::Time deadline, try_deadline, resume_at;
    absl::Status last;
    bool stale = false;
  } ex;
  size_t current = 0;  // The coordinator that answered last.
};

struct Coord {
  std::string id;
  NodeClock clock;
  std::unique_ptr<server::Coordinator> core;
  server::EtcdStateStore* store = nullptr;  // The core's.
  absl::Time paused_until = absl::InfinitePast();
  absl::Time back_at = absl::InfiniteFuture();  // Killed: when it starts again.
  absl::Time next_lease_check;
};

// Maps for one client, from whichever coordinator it reaches.
class SimMaps final : public client_internal::MapSource {
 public:
  SimMaps(ClusterSim& sim, int client) : sim_(sim), client_(client) {}
  absl::StatusOr<proto::ClusterMap> Fetch(absl::Duration) override;
  void Watch() override {}
  std::unique_ptr<proto::ClusterMap> TakeNewest() override { return std::move(pushed_); }
  void Push(const proto::ClusterMap& map) {
    if (map.epoch() <= newest_) return;
    newest_ = map.epoch();
    pushed_ = std::make_unique<proto::ClusterMap>(map);
  }

 private:
  ClusterSim& sim_;
  const int client_;
  uint64_t newest_ = 0;
  std::unique_ptr<proto::ClusterMap> pushed_;
};

struct SimClient {
  std::string id;
  NodeClock clock;
  std::shared_ptr<SimMaps> maps;
  StepExecutor* executor = nullptr;  // The client's.
  std::unique_ptr<Client> client;
  size_t watching = 0;    // The coordinator whose map pushes it follows.
  uint64_t streamed = 0;  // The epoch its stream last sent (0: a new stream).
  int issued = 0;
  int outstanding = 0;
  absl::Time next_issue = absl::InfinitePast();
  absl::Time paused_until = absl::InfinitePast();
  absl::Time back_at = absl::InfinitePast();  // Killed: when it opens again.
};

class ClusterSim {
 public:
  ClusterSim(uint64_t seed, const Scenario& s, bool full_trace)
      : s_(s),
        seed_(seed),
        full_trace_(full_trace),
        rng_(seed),
        net_(std::make_shared<fabric::SimNetwork>(seed)),
        etcd_(seed * 7919 + 1, {.leader_change_per_call = 0.0003, .partition_per_call = 0.0003},
              [this](const std::string& line) {
                // The leader's refreshes every lease / 15 would drown the rest.
                if (line.find("sees /rkv/leader") != std::string::npos ||
                    (line.find("put /rkv/leader ->") != std::string::npos &&
                     line.find("/rkv/state") == std::string::npos)) {
                  return;
                }
                Trace("etcd: " + line);
              }),
        ops_rng_(seed * 31 + 7) {}

  // Runs the seed; empty, or what went wrong.
  std::string Run();
  // Without the operations that certainly changed nothing: failed reads,
  // and writes that failed before any CAS went out (no outcome-unknown
  // mark, docs/RELIABILITY.md). Each value is written once, so a write
  // said to have changed nothing and found later fails the check.
  std::vector<lin::Operation> history() const {
    std::vector<lin::Operation> all = rec_.history();
    std::vector<lin::Operation> kept;
    for (size_t id = 0; id < all.size(); ++id) {
      if (id >= void_.size() || !void_[id]) kept.push_back(std::move(all[id]));
    }
    return kept;
  }
  std::map<std::string, int> counts() const {
    std::map<std::string, int> all = counts_;
    for (const auto& [kind, n] : etcd_.counts()) all["etcd: " + kind] += n;
    return all;
  }
  const std::deque<std::string>& trace() const { return trace_; }
  int failed_ops() const { return failed_ops_; }

  // A coordinator's map as client `c` can fetch it now.
  absl::StatusOr<proto::ClusterMap> FetchFor(int c);

 private:
  void Trace(const std::string& line) {
    if (full_trace_) {
      std::cerr << At(now_) << "  " << line << "\n";
      return;
    }
    if (trace_.size() >= 200) trace_.pop_front();
    trace_.push_back(absl::StrCat(At(now_), "  ", line));
  }
  void Fail(const std::string& what) {
    if (error_.empty()) error_ = absl::StrCat("at ", At(now_), ": ", what);
    Trace("FAILED: " + what);
  }
  void Count(const std::string& kind) { counts_[kind]++; }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  absl::Duration Between(absl::Duration lo, absl::Duration hi) {
    return absl::Microseconds(std::uniform_int_distribution<int64_t>(
        absl::ToInt64Microseconds(lo), absl::ToInt64Microseconds(hi))(rng_));
  }
  NodeClock DrawClock(const std::string& who) {
    NodeClock c;
    c.rate = 1 + std::uniform_real_distribution<double>(-kRateSpread, kRateSpread)(rng_);
    c.offset = Between(absl::ZeroDuration(), absl::Seconds(100));
    Count(c.rate > 1 ? "clock fast" : "clock slow");
    Trace(absl::StrFormat("%s's clock runs at %.4f of true time", who, c.rate));
    return c;
  }

  // The control network: `deliver` runs at `to` after a drawn delay,
  // unless the message is lost; maybe twice.
  void Send(const std::string& from, const std::string& to, const std::string& what,
            std::function<void()> deliver);
  bool Cut(const std::string& from, const std::string& to) const {
    auto it = cuts_.find({from, to});
    return it != cuts_.end() && now_ < it->second;
  }
  void DeliverDue();

  void StartServer(Srv& sv);
  // Counts the pushes `sv`'s core made (before it goes).
  void NotePushes(const Srv& sv) {
    const server::AgentCore::Counters c = sv.core->counters();
    counts_["push done (reconfiguration)"] += int(c.pushes[0][0]);
    counts_["push done (live copy to a spare)"] += int(c.pushes[1][0]);
  }
  void StepServer(Srv& sv);
  // At each wait of `sv`'s push: the clients work meanwhile, and now and
  // then the pusher is paused there (true: the push stops).
  bool PushWaiting(Srv& sv, bool live);
  void TryCoordinator(Srv& sv);
  void OnAnswer(Srv& sv, uint64_t attempt, size_t coord, absl::Status s,
                std::shared_ptr<proto::RegisterResponse> reg,
                std::shared_ptr<proto::HeartbeatResponse> hb);
  void NextCoordinator(Srv& sv);
  void FinishExchange(Srv& sv, size_t coord, absl::Status s,
                      const std::shared_ptr<proto::RegisterResponse>& reg,
                      const std::shared_ptr<proto::HeartbeatResponse>& hb);

  bool StartCoordinator(Coord& c, size_t i);
  void StepCoordinator(Coord& c, size_t i);
  bool Running(const Coord& c) const { return c.core != nullptr && now_ >= c.paused_until; }

  bool OpenClient(SimClient& cl, int i);
  void StepClient(SimClient& cl, int i);
  void Issue(SimClient& cl, int i);

  // The newest map any coordinator holds (the leader's), if one does.
  std::optional<proto::ClusterMap> NewestMap();
  // The group serves with every copy up on the memory the map names and
  // no change under way: one copy may go.
  bool Healthy();
  // `sv`'s process and memory go; it starts again blank later.
  void Lose(Srv& sv);
  // Every running coordinator serves a map with all the groups there
  // will be.
  bool EveryMapWhole();
  // Once healed, what kvctl shows of the coordinators: one leads, with the
  // newest map, and every other that is ready names it. Empty when so;
  // otherwise what is not.
  std::string CoordinatorsAgree();
  void DrawFaults();
  void HealAll();

  const Scenario s_;
  const uint64_t seed_;
  const bool full_trace_;
  std::mt19937_64 rng_;
  std::shared_ptr<fabric::SimNetwork> net_;
  SimEtcd etcd_;
  Rng ops_rng_;
  absl::Time now_ = Origin();
  std::string error_;
  std::deque<std::string> trace_;
  std::map<std::string, int> counts_;

  struct Message {
    std::string to;
    std::function<void()> deliver;
  };
  std::map<std::pair<absl::Time, uint64_t>, Message> messages_;
  uint64_t next_message_ = 0;
  std::map<std::pair<std::string, std::string>, absl::Time> cuts_;
  double drop_ = 0, duplicate_ = 0, delay_ = 0;

  // Before the nodes: a client destroyed with operations in flight runs
  // their callbacks.
  lin::HistoryRecorder rec_;
  std::vector<int> calls_;  // Per recorded operation: callbacks run.
  std::vector<bool> void_;  // Per recorded operation: it certainly changed nothing.
  int failed_ops_ = 0;
  std::set<std::string> unread_;  // Keys the final reads have yet to read.

  std::vector<std::unique_ptr<Srv>> servers_;
  std::vector<std::unique_ptr<Coord>> coords_;
  std::vector<std::unique_ptr<SimClient>> clients_;
  uint64_t last_generation_ = 0;  // The newest of any region that went.
  // A server impaired (lost or paused) and not yet whole again in its group.
  bool impaired_ = false;
  bool faults_on_ = true;
  bool killing_ = false;
  bool clients_run_ = false;  // Past forming: the clients open and work.                // A client
                              // is being killed: its callbacks run.
  fabric::FaultOptions fabric_faults_;  // On the clients' fabrics.
};

absl::StatusOr<proto::ClusterMap> SimMaps::Fetch(absl::Duration) { return sim_.FetchFor(client_); }

void ClusterSim::Send(const std::string& from, const std::string& to, const std::string& what,
                      std::function<void()> deliver) {
  if (Cut(from, to)) {
    Trace(absl::StrCat(from, " -> ", to, ": ", what, "  [lost: partitioned]"));
    return;
  }
  if (faults_on_ && Chance(drop_)) {
    Count("message dropped");
    Trace(absl::StrCat(from, " -> ", to, ": ", what, "  [dropped]"));
    return;
  }
  absl::Duration delay = Between(absl::Microseconds(100), absl::Milliseconds(3));
  if (faults_on_ && Chance(delay_)) {
    delay += Between(absl::Milliseconds(10), kLease / 2);
    Count("message delayed");
  }
  Trace(absl::StrCat(from, " -> ", to, ": ", what,
                     delay > absl::Milliseconds(3)
                         ? absl::StrCat("  [delayed ", absl::FormatDuration(delay), "]")
                         : ""));
  if (faults_on_ && Chance(duplicate_)) {
    Count("message duplicated");
    Trace(absl::StrCat("  (", what, " duplicated)"));
    messages_[{now_ + Between(absl::Microseconds(100), absl::Milliseconds(20)), next_message_++}] =
        {to, deliver};
  }
  messages_[{now_ + delay, next_message_++}] = {to, std::move(deliver)};
}

void ClusterSim::DeliverDue() {
  while (!messages_.empty() && messages_.begin()->first.first <= now_ && error_.empty()) {
    Message m = std::move(messages_.begin()->second);
    messages_.erase(messages_.begin());
    // A paused process reads its messages once it runs again.
    absl::Time paused_until = absl::InfinitePast();
    for (auto& c : coords_) {
      if (m.to == c->id && c->core != nullptr) paused_until = c->paused_until;
    }
    for (auto& sv : servers_) {
      if (m.to == sv->id && sv->region != nullptr) paused_until = sv->paused_until;
    }
    if (now_ < paused_until) {
      messages_[{paused_until, next_message_++}] = std::move(m);
      continue;
    }
    m.deliver();
  }
}

void ClusterSim::StartServer(Srv& sv) {
  sv.incarnation++;
  sv.fabric = net_->NewFabric();
  server::RegionServerOptions o;
  o.region_bytes = kRegionBytes;
  o.listen_address = absl::StrCat(sv.id, ".", sv.incarnation);
  // As kvserver stamps a start (and the agent a fence): the wall clock's
  // milliseconds, above any generation this server had. A blank start
  // must not look older than the memory it replaces.
  o.generation =
      std::max(static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())), last_generation_ + 1);
  o.grace_period = absl::Milliseconds(20);
  o.client_lease = kClientLease;
  o.session_slots = 64;
  o.lease_thread = false;
  o.clock = [this, c = sv.clock] { return c.Local(now_); };
  auto region = server::RegionServer::Create(*sv.fabric, o);
  if (!region.ok()) return Fail(absl::StrCat(sv.id, ": ", region.status().ToString()));
  sv.region = std::move(region).value();
  sv.core = std::make_unique<server::AgentCore>(
      server::AgentCore::Options{sv.id, "soft", 0, [] { return proto::RegionStats(); }, [] {},
                                 /*push_threads=*/false,
                                 [this, s = &sv](bool live) { return PushWaiting(*s, live); }},
      *sv.region);
  sv.ex = {};
  sv.back_at = absl::InfiniteFuture();
  Trace(absl::StrCat(sv.id, " starts blank, generation ", sv.region->generation()));
}

bool ClusterSim::PushWaiting(Srv& sv, bool live) {
  if (!clients_run_) return false;
  for (size_t i = 0; i < clients_.size() && error_.empty(); ++i) {
    if (Chance(0.3)) StepClient(*clients_[i], int(i));
  }
  // The pusher of a reconfiguration is paused mid-push, its targets half
  // written: it may hold the group's one good copy, and the group waits
  // for it. Not a live copy's, which serves: paused, the fabric would
  // serve its memory to clients that have not yet heard its group moved
  // on, nor while a client is paused (docs/RELIABILITY.md, "A paused
  // server").
  if (live || !faults_on_ || sv.pause_after_push || !Chance(1.0 / 20)) return false;
  for (auto& cl : clients_) {
    if (now_ < cl->paused_until) return false;
  }
  sv.pause_after_push = true;
  return true;
}

void ClusterSim::StepServer(Srv& sv) {
  if (sv.region == nullptr) {
    if (now_ >= sv.back_at) StartServer(sv);
    return;
  }
  if (now_ < sv.paused_until) return;
  const absl::Time local = sv.clock.Local(now_);
  // As its lease thread would, a few times per client lease.
  if (local >= sv.next_lease_check) {
    sv.next_lease_check = local + absl::Milliseconds(100);
    sv.region->CheckLeases(local);
  }
  Srv::Exchange& ex = sv.ex;
  if (!ex.active) {
    if (!sv.core->Due(local)) return;
    ex.request = sv.core->Next(local);
    ex.active = true;
    ex.tried = 0;
    ex.deadline = now_ + sv.clock.True(ex.request.timeout);
    ex.last = absl::DeadlineExceededError("no coordinator tried");
    ex.stale = false;
    ex.resume_at = absl::InfinitePast();
    return TryCoordinator(sv);
  }
  if (ex.resume_at != absl::InfinitePast()) {
    if (now_ >= ex.resume_at) {
      ex.resume_at = absl::InfinitePast();
      TryCoordinator(sv);
    }
    return;
  }
  if (now_ >= ex.try_deadline) {
    ex.last = absl::DeadlineExceededError(
        absl::StrCat("coordinator ", coords_[sv.current]->id, ": no answer in time"));
    ex.stale = false;
    NextCoordinator(sv);
  }
}

void ClusterSim::TryCoordinator(Srv& sv) {
  Srv::Exchange& ex = sv.ex;
  const absl::Duration left = ex.deadline - now_;
  if (left <= absl::ZeroDuration()) {
    return FinishExchange(sv, sv.current, ex.last, nullptr, nullptr);
  }
  const uint64_t attempt = ++ex.attempt;
  ex.try_deadline = now_ + std::min(sv.clock.True(ex.request.per_try), left);
  const size_t ci = sv.current;
  const std::string to = coords_[ci]->id;
  const bool reg = ex.request.kind == server::AgentRequest::Kind::kRegister;
  const int incarnation = sv.incarnation;
  Srv* s = &sv;
  auto request = std::make_shared<server::AgentRequest>(ex.request);
  Send(sv.id, to, reg ? "Register" : "Heartbeat",
       [this, s, ci, attempt, incarnation, reg, request] {
         Coord& c = *coords_[ci];
         if (c.core == nullptr) return;  // Killed: no one reads it.
         auto r = std::make_shared<proto::RegisterResponse>();
         auto h = std::make_shared<proto::HeartbeatResponse>();
         const absl::Status st = reg ? c.core->Register(request->registration, r.get())
                                     : c.core->Heartbeat(request->heartbeat, h.get());
         std::string what = absl::StrCat(reg ? "Register" : "Heartbeat",
                                         " answer: ", st.ok() ? "OK" : st.ToString());
         if (st.ok() && !reg && h->has_push()) absl::StrAppend(&what, " (push order)");
         if (st.ok() && !reg && h->fence()) absl::StrAppend(&what, " (fence)");
         Send(c.id, s->id, what, [this, s, ci, attempt, incarnation, st, r, h] {
           if (s->incarnation != incarnation || s->region == nullptr) return;
           OnAnswer(*s, attempt, ci, st, r, h);
         });
       });
}

void ClusterSim::OnAnswer(Srv& sv, uint64_t attempt, size_t coord, absl::Status s,
                          std::shared_ptr<proto::RegisterResponse> reg,
                          std::shared_ptr<proto::HeartbeatResponse> hb) {
  Srv::Exchange& ex = sv.ex;
  // Late (its try timed out) or a duplicate: the call is over for it.
  if (!ex.active || attempt != ex.attempt || ex.resume_at != absl::InfinitePast()) return;
  if (now_ >= ex.try_deadline) return;
  const bool heartbeat = ex.request.kind == server::AgentRequest::Kind::kHeartbeat;
  ex.stale = s.ok() && heartbeat && sv.core->Stale(hb->term());
  if (ex.stale) s = absl::UnavailableError("a deposed coordinator's term");
  if (s.ok() || (!absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s))) {
    return FinishExchange(sv, coord, s, reg, hb);
  }
  ex.last = s;
  NextCoordinator(sv);
}

void ClusterSim::NextCoordinator(Srv& sv) {
  Srv::Exchange& ex = sv.ex;
  sv.current = (sv.current + 1) % coords_.size();
  ++ex.attempt;
  // Every one tried: a leader may be about to take over; not a busy loop.
  if (++ex.tried % coords_.size() == 0) {
    ex.resume_at = std::min(now_ + sv.clock.True(absl::Milliseconds(20)), ex.deadline);
    if (ex.resume_at <= now_) ex.resume_at = now_ + absl::Microseconds(1);
    return;
  }
  TryCoordinator(sv);
}

void ClusterSim::FinishExchange(Srv& sv, size_t coord, absl::Status s,
                                const std::shared_ptr<proto::RegisterResponse>& reg,
                                const std::shared_ptr<proto::HeartbeatResponse>& hb) {
  Srv::Exchange& ex = sv.ex;
  ex.active = false;
  ++ex.attempt;
  const absl::Time local = sv.clock.Local(now_);
  const std::string from = coords_[coord]->id;
  const uint64_t fences = sv.core->counters().fences;
  absl::Status r;
  if (ex.request.kind == server::AgentRequest::Kind::kRegister) {
    r = sv.core->OnRegistered(local, from, s, reg ? *reg : proto::RegisterResponse());
  } else {
    r = sv.core->OnHeartbeat(local, from, s, ex.stale, hb ? *hb : proto::HeartbeatResponse());
  }
  if (sv.core->counters().fences != fences) {
    Trace(absl::StrCat(sv.id, " fenced its region: generation ", sv.region->generation()));
  }
  if (!s.ok()) Trace(absl::StrCat(sv.id, "'s exchange failed: ", s.ToString()));
  if (!r.ok()) Fail(absl::StrCat(sv.id, " was refused: ", r.ToString()));
}

bool ClusterSim::StartCoordinator(Coord& c, size_t i) {
  server::CoordinatorOptions o;
  o.lease = kLease;
  o.replicas = s_.replicas;
  o.clock = [this, k = c.clock] { return k.Local(now_); };
  o.lease_thread = false;
  o.simulated_fabric = true;
  c.core = std::make_unique<server::Coordinator>(o);
  server::EtcdStoreOptions eo;
  eo.prefix = "/rkv";
  eo.id = c.id;
  eo.address = c.id;
  eo.lease = kLease;
  eo.own_thread = false;
  eo.clock = o.clock;
  auto store = std::make_unique<server::EtcdStateStore>(etcd_.Client(int(i)), std::move(eo));
  c.store = store.get();
  c.back_at = absl::InfiniteFuture();
  c.paused_until = absl::InfinitePast();
  Trace(absl::StrCat(c.id, " starts"));
  const absl::Status st = c.core->Start(c.id, c.id, std::move(store));
  if (!st.ok()) Fail(absl::StrCat(c.id, " did not start: ", st.ToString()));
  return st.ok();
}

void ClusterSim::StepCoordinator(Coord& c, size_t i) {
  if (c.core == nullptr) {
    if (now_ >= c.back_at) {
      etcd_.Revive(int(i));
      StartCoordinator(c, i);
    }
    return;
  }
  if (now_ < c.paused_until) return;
  if (c.paused_until != absl::InfinitePast()) {
    c.paused_until = absl::InfinitePast();
    etcd_.Hold(int(i), false);
    Trace(c.id + " runs again");
  }
  if (Chance(0.7)) etcd_.Deliver(int(i));
  for (int k = 0; k < 4; ++k) {
    const server::EtcdStateStore::Action a = c.store->Due();
    if (a == server::EtcdStateStore::Action::kNone) break;
    if (a != server::EtcdStateStore::Action::kRefresh) {
      Trace(absl::StrCat(c.id, " does ", server::EtcdStateStore::ActionName(a)));
    }
    c.store->Do(a);
  }
  const absl::Time local = c.clock.Local(now_);
  if (local >= c.next_lease_check) {
    c.next_lease_check = local + kLease / 4;
    c.core->CheckLeases();
  }
}

absl::StatusOr<proto::ClusterMap> ClusterSim::FetchFor(int ci) {
  SimClient& cl = *clients_[ci];
  for (size_t k = 0; k < coords_.size(); ++k) {
    const size_t i = (cl.watching + k) % coords_.size();
    Coord& c = *coords_[i];
    if (!Running(c) || Cut(cl.id, c.id) || Cut(c.id, cl.id)) continue;
    proto::ClusterMap map;
    if (!c.core->GetClusterMap(&map).ok()) continue;
    if (cl.watching != i) cl.streamed = 0;
    cl.watching = i;
    Trace(absl::StrCat(cl.id, " fetched map epoch ", map.epoch(), " from ", c.id));
    return map;
  }
  Trace(cl.id + " reached no coordinator for the map");
  return absl::UnavailableError("no coordinator reachable");
}

bool ClusterSim::OpenClient(SimClient& cl, int i) {
  client_internal::OpenOptions o;
  o.seed = net_->NextSeed();
  o.clock = [this, k = cl.clock] { return k.Local(now_); };
  if (!fabric_faults_.any()) {
    o.fabric = net_->NewFabric();
  } else {
    // Requests to the servers delayed, failed or their connection broken.
    fabric::FaultOptions f = fabric_faults_;
    f.seed = net_->NextSeed();
    // Its clock also ticks as it is read, so that a request it holds comes
    // due while nothing else runs (a client polled by its destructor).
    o.fabric = fabric::InjectFaults(net_->NewFabric(), f,
                                    [this, k = cl.clock, ticks = std::make_shared<int64_t>(0)] {
                                      return k.Local(now_) + absl::Microseconds((*ticks)++);
                                    });
  }
  o.scratch_bytes = 3 << 20;
  o.cache_entries = 1024;
  o.map_source = cl.maps;
  o.executor = [&cl] {
    auto e = std::make_unique<StepExecutor>();
    cl.executor = e.get();
    return e;
  };
  absl::StatusOr<std::unique_ptr<Client>> c = client_internal::OpenCluster("sim", o);
  if (!c.ok()) {
    Trace(absl::StrCat(cl.id, " could not open: ", c.status().ToString()));
    return false;
  }
  cl.client = std::move(c).value();
  Trace(cl.id + " opened");
  (void)i;
  return true;
}

void ClusterSim::Issue(SimClient& cl, int i) {
  // As lin::IssueRandom, counting every callback.
  const std::string key = absl::StrCat("key", ops_rng_.Uniform(s_.mix.keys));
  std::string value = absl::StrCat("c", i, "-", cl.issued);
  if (value.size() < s_.mix.value_bytes) value.resize(s_.mix.value_bytes, '.');
  int total = 0;
  for (int x : s_.mix.weights) total += x;
  int pick = int(ops_rng_.Uniform(total));
  int kind = 0;
  while (pick >= s_.mix.weights[kind]) pick -= s_.mix.weights[kind++];
  cl.issued++;
  cl.outstanding++;
  SimClient* c = &cl;
  const bool read = kind == 0;
  auto respond = [this, c, read](size_t id, const absl::Status& st, std::string v) {
    if (id >= calls_.size()) calls_.resize(id + 1);
    if (++calls_[id] > 1) return Fail(absl::StrCat("operation ", id, "'s callback ran twice"));
    const lin::Outcome outcome = lin::OutcomeOf(st);
    // A killed client's writes in flight may have taken effect, whatever
    // its destructor says of them.
    if (outcome == lin::Outcome::kUnknown &&
        (read || (!killing_ && !client_internal::OutcomeUnknown(st)))) {
      if (id >= void_.size()) void_.resize(id + 1);
      void_[id] = true;
    }
    if (outcome != lin::Outcome::kUnknown) {
      Trace(absl::StrCat(c->id, " op ", id, " done: ", st.ok() ? "OK" : st.ToString(),
                         v.empty() ? "" : " ", v.substr(0, 12)));
    }
    rec_.Respond(id, outcome, std::move(v));
    c->outstanding--;
    if (outcome == lin::Outcome::kUnknown) {
      // As an application would, it waits a little before the next: the
      // cluster may be reconfiguring or out of reach of its coordinators.
      c->next_issue = std::max(c->next_issue, now_ + Between(kLease / 4, kLease));
      failed_ops_++;
      Trace(absl::StrCat(c->id, " op ", id, " failed: ", st.ToString()));
    }
  };
  static constexpr lin::OpKind kKinds[] = {lin::OpKind::kGet, lin::OpKind::kPut,
                                           lin::OpKind::kInsert, lin::OpKind::kDelete};
  const size_t id = rec_.Invoke(kKinds[kind], key, kind == 1 || kind == 2 ? value : "", i);
  if (id >= calls_.size()) calls_.resize(id + 1);
  static constexpr const char* kNames[] = {"get", "put", "insert", "delete"};
  Trace(absl::StrCat(cl.id, " op ", id, ": ", kNames[kind], " ", key,
                     kind == 1 || kind == 2 ? " " + value.substr(0, 12) : ""));
  switch (kind) {
    case 0:
      cl.client->GetAsync(key, [respond, id](absl::StatusOr<std::string> v) {
        respond(id, v.status(), v.ok() ? *v : "");
      });
      break;
    case 1:
      cl.client->PutAsync(key, value, [respond, id](absl::Status st) { respond(id, st, ""); });
      break;
    case 2:
      cl.client->InsertAsync(key, value, [respond, id](absl::Status st) { respond(id, st, ""); });
      break;
    default:
      cl.client->DeleteAsync(key, [respond, id](absl::Status st) { respond(id, st, ""); });
  }
}

void ClusterSim::StepClient(SimClient& cl, int i) {
  if (now_ < cl.paused_until || now_ < cl.back_at) return;
  if (cl.client == nullptr) {
    if (Chance(0.05)) OpenClient(cl, i);
    return;
  }
  // The watch stream (WatchClusterMap): the newer maps of the coordinator
  // it follows, now and then.
  if (Chance(0.05)) {
    Coord& c = *coords_[cl.watching];
    absl::StatusOr<std::optional<proto::ClusterMap>> next = absl::UnavailableError("unreachable");
    if (Running(c) && !Cut(c.id, cl.id)) next = c.core->NextMap(cl.streamed, absl::ZeroDuration());
    if (next.ok() && next->has_value()) {
      cl.streamed = (*next)->epoch();
      cl.maps->Push(**next);
    } else if (!next.ok() || cl.streamed == 0) {
      // The stream broke, or the coordinator has no map yet (just
      // started): on to the next, as CoordinatorMapSource does.
      cl.watching = (cl.watching + 1) % coords_.size();
      cl.streamed = 0;
    }
  }
  if (Chance(0.5)) cl.executor->RunQueued();
  // Operations spread over a few leases, so that faults meet them.
  if (cl.outstanding < s_.outstanding && cl.issued < s_.ops_per_client && now_ >= cl.next_issue) {
    Issue(cl, i);
    cl.next_issue = now_ + Between(absl::ZeroDuration(), absl::Milliseconds(120));
  }
  cl.client->Poll(absl::ZeroDuration());
}

std::optional<proto::ClusterMap> ClusterSim::NewestMap() {
  std::optional<proto::ClusterMap> best;
  for (auto& c : coords_) {
    if (c->core == nullptr) continue;
    proto::ClusterMap map;
    if (!c->core->GetClusterMap(&map).ok()) continue;
    if (!best || map.epoch() > best->epoch()) best = map;
  }
  return best;
}

std::string ClusterSim::CoordinatorsAgree() {
  std::vector<std::pair<Coord*, proto::CoordinatorStatus>> described;
  std::string leader;
  for (auto& c : coords_) {
    proto::CoordinatorStatus st;
    if (absl::Status s = c->core->Describe(&st); !s.ok()) {
      return absl::StrCat(c->id, " does not describe itself: ", s.ToString());
    }
    if (st.leading()) {
      if (!leader.empty()) return absl::StrCat(leader, " and ", st.id(), " both lead");
      leader = st.id();
      const server::Coordinator::Snapshot m = c->core->MetricsSnapshot();
      const std::optional<proto::ClusterMap> newest = NewestMap();
      if (!m.leading || !newest || m.map.epoch() != newest->epoch()) {
        return absl::StrCat("the leader ", st.id(), "'s metrics: leading ", m.leading, ", epoch ",
                            m.map.epoch(), " of ", newest ? newest->epoch() : 0);
      }
    }
    described.emplace_back(c.get(), st);
  }
  if (leader.empty()) return "no coordinator leads";
  for (const auto& [c, st] : described) {
    if (st.ready() && st.leader_address() != leader) {
      return absl::StrCat(c->id, " names ", st.leader_address(), " as the leader, not ", leader);
    }
  }
  return "";
}

bool ClusterSim::EveryMapWhole() {
  for (auto& c : coords_) {
    proto::ClusterMap map;
    if (c->core == nullptr) continue;
    if (!c->core->GetClusterMap(&map).ok() ||
        map.groups_size() != (s_.replicas == 1 ? s_.servers : 1)) {
      return false;
    }
  }
  return true;
}

bool ClusterSim::Healthy() {
  std::optional<proto::ClusterMap> map = NewestMap();
  // One copy: a group per server; more: one group, and a spare.
  if (!map || map->groups_size() != (s_.replicas == 1 ? s_.servers : 1)) return false;
  for (const proto::ReplicaGroup& g : map->groups()) {
    if (g.state() != proto::GROUP_STATE_SERVING || uint32_t(g.members_size()) != s_.replicas ||
        g.generations_size() != g.members_size()) {
      return false;
    }
    for (int m = 0; m < g.members_size(); ++m) {
      bool whole = false;
      for (auto& sv : servers_) {
        whole |= sv->id == g.members(m) && sv->region != nullptr && now_ >= sv->paused_until &&
                 sv->region->generation() == g.generations(m);
      }
      if (!whole) return false;
    }
  }
  for (auto& sv : servers_) {
    if (sv->region == nullptr || now_ < sv->paused_until || !sv->core->registered()) return false;
  }
  return true;
}

void ClusterSim::Lose(Srv& sv) {
  last_generation_ = std::max(last_generation_, sv.region->generation());
  NotePushes(sv);
  sv.core.reset();
  sv.region.reset();
  sv.fabric.reset();
  sv.back_at = now_ + Between(kLease / 2, kLease * 3);
}

void ClusterSim::DrawFaults() {
  // Servers: one impaired at a time, and only while the group holds every
  // acknowledged write on each copy; losing every copy is not a bug.
  if (impaired_ && Chance(0.05) && Healthy()) impaired_ = false;
  // etcd's faults come and go meanwhile.
  bool client_paused = false;
  for (auto& c : clients_) client_paused |= now_ < c->paused_until;
  if (!impaired_ && !client_paused && Chance(1.0 / 600) && Healthy()) {
    Srv& sv = *servers_[rng_() % servers_.size()];
    impaired_ = true;
    // One copy: a server's memory is its keys' only copy, and only paused.
    if (s_.replicas > 1 && Chance(0.5)) {
      if (Chance(1.0 / 3)) {
        // Stopped (kvserver's SIGTERM): it tells the coordinators it
        // leaves, as CoordinatorStub::Call tries each, and its memory goes.
        Count("server stopped");
        Trace("FAULT " + sv.id + " stopped");
        if (std::optional<proto::DeregisterRequest> dr = sv.core->Stop()) {
          for (auto& c : coords_) {
            Send(sv.id, c->id, "Deregister", [this, c = c.get(), dr = *dr] {
              if (c->core == nullptr) return;  // Killed: no one reads it.
              Trace(absl::StrCat(c->id, ": Deregister ", dr.id(), ": ",
                                 c->core->Deregister(dr).ToString()));
            });
          }
        }
      } else {
        Count("server lost with its memory");
        Trace("FAULT " + sv.id + " lost with its memory");
      }
      Lose(sv);
    } else {
      const absl::Duration d = Between(kLease / 2, kLease * 2);
      Count(d > kLease ? "server paused past its lease" : "server paused");
      Trace(absl::StrCat("FAULT ", sv.id, " paused for ", absl::FormatDuration(d)));
      sv.paused_until = now_ + d;
    }
  }
  // A second server paused, its memory kept, while a group reconfigures
  // without the first: the group must wait for the copies it counts on,
  // and take no other for one.
  if (impaired_ && Chance(1.0 / 1500)) {
    std::optional<proto::ClusterMap> map = NewestMap();
    Srv& sv = *servers_[rng_() % servers_.size()];
    if (map && map->groups_size() == 1 &&
        map->groups(0).state() == proto::GROUP_STATE_RECONFIGURING && sv.region != nullptr &&
        now_ >= sv.paused_until) {
      const absl::Duration d = Between(kLease / 2, kLease * 2);
      Count("second server paused while its group reconfigures");
      Trace(absl::StrCat("FAULT ", sv.id, " paused for ", absl::FormatDuration(d),
                         " while its group reconfigures"));
      sv.paused_until = now_ + d;
    }
  }
  // Clients: paused (past their session's lease, some), or killed with
  // operations in flight and opened again later.
  const int k = int(rng_() % clients_.size());
  SimClient& cl = *clients_[k];
  if (cl.client != nullptr && now_ >= cl.paused_until) {
    // Not while a server is impaired: a paused server's memory is still
    // served by its NIC, and a client that slept through the
    // reconfiguration may read it (docs/RELIABILITY.md, "A paused server").
    if (!impaired_ && Chance(1.0 / 3000)) {
      const absl::Duration d = Between(absl::Milliseconds(100), absl::Seconds(3));
      Count(d > kClientLease ? "client paused past its lease" : "client paused");
      Trace(absl::StrCat("FAULT ", cl.id, " paused for ", absl::FormatDuration(d)));
      cl.paused_until = now_ + d;
    } else if (Chance(1.0 / 5000)) {
      Count("client killed");
      Trace(
          absl::StrCat("FAULT ", cl.id, " killed with ", cl.outstanding, " operations in flight"));
      killing_ = true;
      cl.client.reset();
      killing_ = false;
      cl.executor = nullptr;
      cl.maps = std::make_shared<SimMaps>(*this, k);  // A new process knows no map.
      cl.streamed = 0;
      cl.back_at = now_ + Between(absl::Milliseconds(10), absl::Seconds(1));
    }
  }
  // Coordinators.
  const size_t ci = rng_() % coords_.size();
  Coord& c = *coords_[ci];
  if (c.core != nullptr && now_ >= c.paused_until) {
    if (Chance(1.0 / 5000)) {
      Count("coordinator killed");
      Trace("FAULT " + c.id + " killed");
      etcd_.Crash(int(ci));
      c.core.reset();
      c.store = nullptr;
      c.back_at = now_ + Between(absl::Milliseconds(10), kLease * 2);
    } else if (Chance(1.0 / 4000)) {
      const absl::Duration d = Between(kLease / 3, kLease * 2);
      Count(d > kLease ? "coordinator paused past its lease" : "coordinator paused");
      Trace(absl::StrCat("FAULT ", c.id, " paused for ", absl::FormatDuration(d)));
      c.paused_until = now_ + d;
      etcd_.Hold(int(ci), true);
    }
  }
  // etcd.
  if (Chance(1.0 / 6000)) etcd_.ChangeLeader();
  if (Chance(1.0 / 8000)) etcd_.LoseQuorum(Between(absl::Milliseconds(100), kLease * 2));
  if (Chance(1.0 / 6000)) etcd_.Partition(int(ci), Between(absl::Milliseconds(50), kLease));
  if (Chance(1.0 / 2000)) etcd_.BreakWatches(int(ci), Between(absl::ZeroDuration(), kLease / 3));
  // Partitions of the control network between a coordinator and a server
  // or a client, one way or both (coordinators reach each other only
  // through etcd, clients and servers only through the fabric).
  if (Chance(1.0 / 1200)) {
    const bool server_side = Chance(0.5);
    const std::string other = server_side ? servers_[rng_() % servers_.size()]->id
                                          : clients_[rng_() % clients_.size()]->id;
    // A server cut off from a coordinator is impaired for its group.
    if (server_side && (impaired_ || !Healthy())) return;
    if (server_side) impaired_ = true;
    const absl::Duration d = Between(absl::Milliseconds(20), kLease * 2);
    const bool one_way = Chance(0.5);
    const bool inbound = Chance(0.5);
    const std::string& a = inbound ? other : c.id;
    const std::string& b = inbound ? c.id : other;
    cuts_[{a, b}] = now_ + d;
    if (!one_way) cuts_[{b, a}] = now_ + d;
    Count(one_way ? "partition one-way" : "partition");
    Trace(absl::StrCat("FAULT partition ", a, one_way ? " -/-> " : " <-/-> ", b, " for ",
                       absl::FormatDuration(d)));
  }
}

void ClusterSim::HealAll() {
  faults_on_ = false;
  etcd_.set_faults(false);
  cuts_.clear();
  for (auto& sv : servers_) {
    if (sv->region == nullptr) sv->back_at = std::min(sv->back_at, now_);
    sv->paused_until = std::min(sv->paused_until, now_);
  }
  for (auto& cl : clients_) {
    cl->paused_until = std::min(cl->paused_until, now_);
    cl->back_at = std::min(cl->back_at, now_);
  }
  for (auto& c : coords_) {
    if (c->core == nullptr) c->back_at = std::min(c->back_at, now_);
    c->paused_until = std::min(c->paused_until, now_);
  }
  Trace("every fault healed");
}

std::string ClusterSim::Run() {
  etcd_.AdvanceTo(now_);
  Trace("etcd's node i is coordinator c(i+1)");
  drop_ = Chance(0.5) ? 0.01 : 0;
  duplicate_ = Chance(0.5) ? 0.01 : 0;
  delay_ = Chance(0.5) ? 0.02 : 0;
  if (Chance(0.5)) {
    fabric_faults_.delay_probability = 0.05;
    fabric_faults_.max_delay = absl::Microseconds(300);
    fabric_faults_.fail_probability = 0.005;
    fabric_faults_.drop_probability = 0.001;
  }
  for (int i = 0; i < s_.coordinators; ++i) {
    auto c = std::make_unique<Coord>();
    c->id = absl::StrCat("c", i + 1);
    c->clock = DrawClock(c->id);
    coords_.push_back(std::move(c));
  }
  for (size_t i = 0; i < coords_.size(); ++i) {
    if (!StartCoordinator(*coords_[i], i)) return error_;
  }
  for (int i = 0; i < s_.servers; ++i) {
    auto sv = std::make_unique<Srv>();
    sv->id = absl::StrCat("s", i + 1);
    sv->clock = DrawClock(sv->id);
    servers_.push_back(std::move(sv));
    StartServer(*servers_.back());
  }
  for (int i = 0; i < s_.clients; ++i) {
    auto cl = std::make_unique<SimClient>();
    cl->id = absl::StrCat("k", i + 1);
    cl->clock = DrawClock(cl->id);
    cl->maps = std::make_shared<SimMaps>(*this, i);
    clients_.push_back(std::move(cl));
  }
  // Load under faults, then faults healed; then every key read once the
  // group serves whole again.
  // The cluster forms first (clients open on a cluster that serves).
  enum class Phase {
    kForming,
    kLoad,
    kHealing,
    kFinalReads,
    kCoordinators,
    kDone
  } phase = Phase::kForming;
  const absl::Time limit = now_ + absl::Seconds(120);
  absl::Time healed_at, read_at;
  while (error_.empty() && phase != Phase::kDone) {
    if (now_ > limit) {
      Fail("the run did not end in 120 s of simulated time");
      break;
    }
    now_ += Between(absl::Microseconds(200), absl::Microseconds(1500));
    etcd_.AdvanceTo(now_);
    DeliverDue();
    if (phase == Phase::kLoad && clients_.size() > 0) DrawFaults();
    for (size_t i = 0; i < coords_.size() && error_.empty(); ++i) StepCoordinator(*coords_[i], i);
    for (auto& sv : servers_) {
      if (error_.empty()) StepServer(*sv);
      if (sv->pause_after_push) {
        sv->pause_after_push = false;
        const absl::Duration d = Between(kLease / 2, kLease * 2);
        Count("pusher paused mid-push");
        Trace(absl::StrCat("FAULT ", sv->id, " paused mid-push for ", absl::FormatDuration(d)));
        sv->paused_until = now_ + d;
        impaired_ = true;
      }
    }
    if (phase == Phase::kForming) {
      // The load begins once every coordinator's map shows every group: a
      // client that opened on a map with fewer would place keys on those,
      // and the cluster's growth would then route them elsewhere. Nothing
      // moves keys between groups yet (the store does not grow online).
      if (Chance(0.1) && Healthy() && EveryMapWhole()) {
        Trace("the groups serve: load begins");
        phase = Phase::kLoad;
        clients_run_ = true;
      }
      continue;
    }
    for (size_t i = 0; i < clients_.size() && error_.empty(); ++i) {
      StepClient(*clients_[i], int(i));
    }
    bool busy = false;
    for (auto& cl : clients_) busy |= cl->issued < s_.ops_per_client || cl->outstanding > 0;
    if (phase == Phase::kLoad && !busy) {
      HealAll();
      healed_at = now_;
      phase = Phase::kHealing;
    } else if (phase == Phase::kHealing && now_ >= etcd_.FaultsEnd() && Chance(0.1) && Healthy()) {
      // The last reads: every key, from the first client.
      Trace("the group serves whole again: final reads");
      for (int k = 0; k < s_.mix.keys; ++k) unread_.insert(absl::StrCat("key", k));
      phase = Phase::kFinalReads;
    } else if (phase == Phase::kFinalReads) {
      SimClient& cl = *clients_[0];
      if (cl.client != nullptr && cl.outstanding == 0 && now_ >= cl.next_issue) {
        if (unread_.empty()) {
          phase = Phase::kCoordinators;
          read_at = now_;
          continue;
        }
        if (now_ > healed_at + absl::Seconds(30)) {
          Fail(absl::StrCat("the final reads did not succeed 30 s after the faults healed"));
          break;
        }
        // One at a time; a read that fails (a session the fence of a
        // reconfiguration shut out, say) is tried again a little later.
        const std::string key = *unread_.begin();
        cl.outstanding++;
        cl.next_issue = now_ + absl::Milliseconds(20);
        const size_t id = rec_.Invoke(lin::OpKind::kGet, key, "", 0);
        if (id >= calls_.size()) calls_.resize(id + 1);
        SimClient* c = &cl;
        cl.client->GetAsync(key, [this, c, id, key](absl::StatusOr<std::string> v) {
          if (++calls_[id] > 1)
            return Fail(absl::StrCat("operation ", id, "'s callback ran twice"));
          if (v.ok() || absl::IsNotFound(v.status())) {
            unread_.erase(key);
          } else {
            Trace(absl::StrCat("final read of ", key, " failed: ", v.status().ToString()));
          }
          rec_.Respond(id, lin::OutcomeOf(v.status()), v.ok() ? *v : "");
          c->outstanding--;
        });
      }
    } else if (phase == Phase::kCoordinators) {
      const std::string why = CoordinatorsAgree();
      if (why.empty()) {
        phase = Phase::kDone;
      } else if (now_ > read_at + kLease * 4) {
        Fail(absl::StrCat("a lease after the final reads, ", why));
      }
    } else if (phase == Phase::kHealing && now_ > healed_at + absl::Seconds(30)) {
      Fail("the group did not serve whole again 30 s after the faults healed");
    }
  }
  for (size_t id = 0; id < calls_.size() && error_.empty(); ++id) {
    if (calls_[id] != 1)
      Fail(absl::StrCat("operation ", id, "'s callback ran ", calls_[id], " times"));
  }
  if (!error_.empty()) return error_;
  for (auto& sv : servers_) {
    if (sv->core != nullptr) NotePushes(*sv);
  }
  if (fabric_faults_.any()) Count("client requests faulted (seeds)");
  // Shut down in order: clients (nothing in flight), servers, coordinators.
  for (auto& cl : clients_) {
    cl->client.reset();
  }
  servers_.clear();
  for (auto& c : coords_) {
    if (c->core) c->core->Stop();
  }
  coords_.clear();
  return error_;
}

std::optional<uint64_t> EnvNumber(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::nullopt;
  return std::strtoull(env, nullptr, 10);
}

TEST(ClusterSimulationTest, RealAgentsCoordinatorsAndClientsUnderFaults) {
  // Seeds 1..N (RKV_SIM_SEEDS=N overrides N); RKV_SIM_SEED=S reruns seed S
  // alone.
  uint64_t seeds = EnvNumber("RKV_SIM_SEEDS").value_or(1000);
  uint64_t first = 1;
  if (std::optional<uint64_t> one = EnvNumber("RKV_SIM_SEED")) {
    first = *one;
    seeds = 1;
  }
  const bool full_trace = EnvNumber("RKV_SIM_TRACE").value_or(0) != 0;
  // The servers' and coordinators' logs go with the trace only when asked
  // (RKV_SIM_LOG=1): they carry the machine's time, not the simulation's.
  if (EnvNumber("RKV_SIM_LOG").value_or(0) == 0) SetMinLogSeverity(LogSeverity::kError);
  ASSERT_GT(seeds, 0u) << "RKV_SIM_SEEDS must be a positive number";
  std::map<std::string, int> counts;
  int ops = 0, failed = 0, inconclusive = 0;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    Scenario s;
    // A fifth of the seeds keep one copy (two servers, a group each); the
    // others two or three, on one server more (a spare).
    s.replicas = seed % 5 == 0 ? 1 : 2 + seed % 2;
    s.servers = s.replicas == 1 ? 2 : int(s.replicas) + 1;
    s.coordinators = 2 + int(seed / 2 % 2);
    s.clients = 2 + int(seed / 4 % 2);
    s.mix.keys = 1 + int(seed / 8 % 3);
    s.mix.value_bytes = 200;
    ClusterSim sim(seed, s, full_trace);
    const std::string error = sim.Run();
    auto replay = [&] {
      std::string t;
      for (const std::string& line : sim.trace()) absl::StrAppend(&t, line, "\n");
      return absl::StrCat("\nreplay: RKV_SIM_SEED=", seed,
                          " build/bin/cluster_simulation_test (RKV_SIM_TRACE=1 for the whole "
                          "trace)\nthe trace's end:\n",
                          t);
    };
    ASSERT_TRUE(error.empty()) << "seed " << seed << ": " << error << replay();
    const std::vector<lin::Operation> history = sim.history();
    const lin::CheckResult r = lin::Check(history);
    if (r.gave_up) {
      ++inconclusive;
      continue;
    }
    ASSERT_TRUE(r.linearizable) << "seed " << seed << ": not linearizable\n"
                                << lin::ShortestFailingPrefix(history) << replay();
    ops += int(history.size());
    failed += sim.failed_ops();
    for (const auto& [kind, n] : sim.counts()) counts[kind] += n;
  }
  EXPECT_LE(inconclusive * 100, int(seeds)) << "over 1 % of seeds inconclusive";
  std::cout << seeds << " seeds: " << ops << " operations checked linearizable (" << failed
            << " failed), " << inconclusive << " seeds inconclusive\nfaults and events:\n";
  for (const auto& [kind, n] : counts) std::cout << "  " << kind << ": " << n << "\n";
  if (seeds >= 100) {
    for (const char* kind : {"server lost with its memory",
                             "server paused past its lease",
                             "coordinator killed",
                             "coordinator paused past its lease",
                             "etcd: etcd leader change",
                             "etcd: etcd quorum lost",
                             "partition",
                             "partition one-way",
                             "message dropped",
                             "message delayed",
                             "message duplicated",
                             "clock fast",
                             "clock slow",
                             "client paused past its lease",
                             "client killed",
                             "server stopped",
                             "pusher paused mid-push",
                             "second server paused while its group reconfigures",
                             "push done (live copy to a spare)",
                             "client requests faulted (seeds)"}) {
      EXPECT_GT(counts[kind], 0) << "no seed had: " << kind;
    }
  }
}

}  // namespace
}  // namespace rkv::testing
