// A replicated cluster in one process on the deterministic fabric, over
// many seeds: the coordinator's replica groups (server/kvcoord/replica_groups.h)
// reconfigure servers that are lost with their memory mid-load, come back
// blank, are copied in live while clients work and then join; every
// seed's history is checked for linearizability.
//
// The servers carry the coordinator's orders out as kvserver's agent does
// (server/kvserver/member_agent.cc: register, fence, settle and push, copy live,
// report), with direct calls instead of gRPC; the clients open a session on
// their group's copies and open another when those change, as the cluster
// client does. One thread runs everything, so a seed fixes the whole run.
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/region/region_client.h"
#include "common/fabric/faulty_fabric.h"
#include "common/fabric/sim/sim_network.h"
#include "common/logging.h"
#include "common/random.h"
#include "gtest/gtest.h"
#include "server/kvcoord/replica_group.h"
#include "server/kvcoord/replica_group_codec.h"
#include "server/kvcoord/replica_groups.h"
#include "server/kvserver/region_server.h"
#include "tests/linearizability/checker.h"
#include "tests/linearizability/random_ops.h"

namespace rkv::testing {
namespace {

namespace lin = ::rkv::linearizability;

struct Scenario {
  uint32_t replicas = 2;
  int servers = 3;  // One more than the copies: a spare to copy in.
  int clients = 3;
  int ops_per_client = 60;
  int outstanding = 2;
  int losses = 2;  // Servers lost with their memory, one at a time.
  uint64_t region_bytes = 1 << 20;
  lin::OpMix mix;
  fabric::FaultOptions faults;  // On the clients' fabrics.
};

// A kvserver: its region (gone while the server is down) and what its
// agent keeps between exchanges with the coordinator.
struct Server {
  std::string id;
  int incarnation = 0;
  // The region's fabric node goes after the region.
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<server::RegionServer> region;
  // The first generation of the memory it holds (a blank start).
  uint64_t lineage = 0;
  bool registered = false;
  std::vector<uint64_t> hashes;  // Taken at the last fence, sent with the next registration.
  std::string push_key;          // The order carried out last.
  std::optional<proto::PushProgress> report;
  int down_at = -1;  // The spin it was lost at; -1 while up.
};

// What the coordinator knows of a registration.
struct Member {
  server::ServerView view;
  fabric::RemoteRegion address;
  std::vector<uint64_t> chunk_hashes;
};

// A session on a group's copies.
struct Session {
  std::unique_ptr<Client> client;
  std::string copies;  // What it reaches: configuration, members, registrations.
  int failed = 0;      // Operations that failed through it.
  int failed_at = 0;   // The spin of the first.
};

// A cluster client: a session on its group's copies, and the sessions of
// earlier copies draining what they had in flight.
struct SimClient {
  client_internal::OpenOptions options;  // Its sessions'.
  std::shared_ptr<client_internal::ClientResources> resources;
  // Sessions are held by pointer: operations in flight count their
  // failures into them.
  std::unique_ptr<Session> session;
  std::vector<std::unique_ptr<Session>> draining;
  int issued = 0;
  int outstanding = 0;
};

class ClusterSim {
 public:
  ClusterSim(uint64_t seed, const Scenario& s)
      : s_(s), net_(std::make_shared<fabric::SimNetwork>(seed)), rng_(seed), groups_(s.replicas) {}

  // Runs the scenario to its end; false (with a failure recorded) when it
  // cannot finish.
  bool Run();
  std::vector<lin::Operation> history() const { return rec_.history(); }
  int losses() const { return losses_; }
  int live_copies() const { return live_copies_; }
  // Operations that failed, by code.
  const std::map<absl::StatusCode, int>& failures() const { return failures_; }

 private:
  std::map<std::string, server::ServerView> Views() const {
    std::map<std::string, server::ServerView> v;
    for (const auto& [id, m] : members_) v[id] = m.view;
    return v;
  }
  const server::ReplicaGroup* Group() const {
    return groups_.groups().empty() ? nullptr : &groups_.groups().front();
  }
  bool Start(Server& sv);
  void Lose(Server& sv);
  // The coordinator notices a lost server (its lease ran out).
  void MarkDown(Server& sv);
  void Register(Server& sv);
  // One heartbeat of `sv`'s agent: report, then carry out the orders.
  void Exchange(Server& sv);
  void RunPush(Server& sv, proto::PushOrder order);
  // Every client: follow the map, issue, poll.
  void StepClients();
  // Maybe loses a server; never the one pushing, nor the last holder of
  // the acknowledged writes.
  void MaybeLose(const Server* pushing);
  bool Holds(const Server& sv, uint64_t generation) const {
    return sv.region != nullptr && sv.lineage <= generation &&
           generation <= sv.region->generation();
  }

  const Scenario s_;
  std::shared_ptr<fabric::SimNetwork> net_;
  Rng rng_;
  server::ReplicaGroups groups_;
  std::vector<Server> servers_;
  std::map<std::string, Member> members_;
  std::vector<SimClient> clients_;
  lin::HistoryRecorder rec_;
  uint64_t next_generation_ = 100;
  int spin_ = 0;
  int losses_ = 0;
  int live_copies_ = 0;
  std::map<absl::StatusCode, int> failures_;
};

bool ClusterSim::Start(Server& sv) {
  sv.incarnation++;
  sv.fabric = net_->NewFabric();
  const uint64_t generation = next_generation_++;
  auto region = server::RegionServer::Create(
      *sv.fabric, {.region_bytes = s_.region_bytes,
                   .index_share = 0.25,
                   .listen_address = absl::StrCat(sv.id, ".", sv.incarnation),
                   .generation = generation,
                   .grace_period = absl::Milliseconds(5),
                   .lease_thread = false});
  EXPECT_TRUE(region.ok()) << region.status();
  if (!region.ok()) return false;
  sv.region = std::move(region).value();
  sv.lineage = generation;
  sv.registered = false;
  sv.hashes.clear();
  sv.push_key.clear();
  sv.report.reset();
  sv.down_at = -1;
  return true;
}

void ClusterSim::Lose(Server& sv) {
  sv.region.reset();
  sv.fabric.reset();
  sv.down_at = spin_;
  losses_++;
}

void ClusterSim::MarkDown(Server& sv) {
  auto m = members_.find(sv.id);
  if (m == members_.end() || !m->second.view.up) return;
  m->second.view.up = false;
  groups_.Update(Views());
}

void ClusterSim::Register(Server& sv) {
  Member& m = members_[sv.id];
  const uint64_t g = sv.region->generation();
  const bool same_memory = m.view.generation != 0 && sv.region->previous_generation() != 0 &&
                           sv.region->previous_generation() == m.view.generation;
  m.view = {true, g, s_.region_bytes, same_memory ? m.view.lineage : g};
  m.address = sv.region->address();
  m.chunk_hashes = std::move(sv.hashes);
  sv.hashes.clear();
  sv.registered = true;
  groups_.Update(Views());
}

void ClusterSim::Exchange(Server& sv) {
  if (sv.region == nullptr) return;
  if (!sv.registered) return Register(sv);
  if (sv.report && groups_.OnProgress(sv.id, *sv.report, Views())) groups_.Update(Views());
  if (groups_.MustFence(sv.id, sv.region->generation())) {
    const absl::Status fenced = sv.region->Fence(next_generation_++);
    EXPECT_TRUE(fenced.ok()) << fenced;
    sv.hashes = sv.region->ChunkHashes();
    sv.registered = false;
    sv.push_key.clear();
    sv.report.reset();
    return;
  }
  groups_.BeginPush(sv.id, Views());
  std::optional<proto::PushOrder> order = groups_.PushFor(sv.id, Views());
  if (!order) {
    sv.push_key.clear();
    sv.report.reset();
    return;
  }
  RunPush(sv, *std::move(order));
}

void ClusterSim::RunPush(Server& sv, proto::PushOrder order) {
  std::string key = absl::StrCat(order.config(), order.live() ? "/live" : "");
  std::vector<fabric::RemoteRegion> targets;
  std::vector<std::vector<uint64_t>> hashes;
  for (const proto::ServerInfo& t : order.targets()) {
    Member& m = members_.at(t.id());
    absl::StrAppend(&key, "/", t.id(), ":", m.view.generation);
    targets.push_back(m.address);
    // Handed out once, as the coordinator does; never for a live copy.
    hashes.push_back(order.live() ? std::vector<uint64_t>{} : std::move(m.chunk_hashes));
    m.chunk_hashes.clear();
  }
  if (key == sv.push_key) return;  // Done, and reported with every exchange.
  sv.push_key = key;
  proto::PushProgress& p = sv.report.emplace();
  p.set_group(order.group());
  p.set_config(order.config());
  p.set_live(order.live());
  for (const proto::ServerInfo& t : order.targets()) {
    p.add_target_generations(members_.at(t.id()).view.generation);
  }
  live_copies_ += order.live();
  std::atomic<uint64_t> copied{0};
  std::atomic<bool> cancel{false};
  // While the push waits for the targets, clients work and other servers
  // may be lost (this one stays: its memory is what is being sent).
  const server::RegionServer::PushControl control{&copied, &cancel, 0, [&] {
                                                    StepClients();
                                                    MaybeLose(&sv);
                                                  }};
  absl::Status st = order.live() ? absl::OkStatus() : sv.region->Settle(order.wipe());
  for (size_t i = 0; i < targets.size() && st.ok(); ++i) {
    absl::StatusOr<uint64_t> sent = sv.region->Push(targets[i], hashes[i], control);
    if (!sent.ok()) {
      st = sent.status();
      p.set_failed_target(order.targets(int(i)).id());
    }
  }
  p.set_copied_bytes(copied.load());
  p.set_copy_bytes(sv.region->PushBytes() * targets.size());
  p.set_done(st.ok());
  p.set_error(std::string(st.message()));
}

void ClusterSim::MaybeLose(const Server* pushing) {
  // The losses spread over the run: the k-th once k/(losses+1) of the
  // operations have been issued, at a random moment after.
  int issued = 0;
  for (const SimClient& cl : clients_) issued += cl.issued;
  if (losses_ >= s_.losses ||
      issued * (s_.losses + 1) < (losses_ + 1) * s_.clients * s_.ops_per_client ||
      rng_.Uniform(20) != 0) {
    return;
  }
  Server& sv = servers_[rng_.Uniform(servers_.size())];
  if (&sv == pushing || sv.region == nullptr) return;
  // Someone else up must still hold what the group acknowledged.
  const server::ReplicaGroup* g = Group();
  if (g != nullptr) {
    bool held_elsewhere = g->serving.empty();
    for (const server::Member& m : g->serving) {
      for (const Server& other : servers_) {
        held_elsewhere |= &other != &sv && other.id == m.id && Holds(other, m.generation);
      }
    }
    if (!held_elsewhere) return;
  }
  Lose(sv);
}

void ClusterSim::StepClients() {
  // The map a client would read: the group, its members' registrations.
  const server::ReplicaGroup* g = Group();
  std::string copies;
  std::vector<fabric::RemoteRegion> regions;
  if (g != nullptr && g->state == server::GroupState::kServing && !g->forming) {
    copies = absl::StrCat(g->config);
    for (const std::string& id : server::Ids(g->members)) {
      const Member& m = members_.at(id);
      if (!m.view.up) {
        copies.clear();
        break;
      }
      absl::StrAppend(&copies, "/", id, ":", m.view.generation, ":", m.address.rkey);
      regions.push_back(m.address);
    }
  }
  for (size_t c = 0; c < clients_.size(); ++c) {
    SimClient& cl = clients_[c];
    // After a failure a cluster client issues nothing more until it reads
    // a newer map, or reconnects when none comes.
    if (cl.session && cl.session->failed > 0 && cl.session->failed_at == 0) {
      cl.session->failed_at = spin_;
    }
    if (cl.session && (cl.session->copies != copies ||
                       (cl.session->failed > 0 && spin_ - cl.session->failed_at >= 100))) {
      cl.draining.push_back(std::move(cl.session));
    }
    if (!cl.session && !copies.empty()) {
      client_internal::OpenOptions o = cl.options;
      o.seed = net_->NextSeed();
      absl::StatusOr<std::unique_ptr<Client>> session =
          client_internal::OpenReplicatedSession(regions, o, {}, cl.resources);
      // A member lost but not yet noticed: the next map tells.
      if (session.ok()) {
        cl.session = std::make_unique<Session>();
        cl.session->client = std::move(session).value();
        cl.session->copies = copies;
      }
    }
    while (cl.session && cl.session->failed == 0 && cl.outstanding < s_.outstanding &&
           cl.issued < s_.ops_per_client) {
      lin::IssueRandom(*cl.session->client, int(c), cl.issued++, rng_, s_.mix, rec_, cl.outstanding,
                       [this, s = cl.session.get()](const absl::Status& st) {
                         s->failed++;
                         failures_[st.code()]++;
                       });
    }
    if (cl.session) cl.session->client->Poll(absl::ZeroDuration());
    for (auto& d : cl.draining) d->client->Poll(absl::ZeroDuration());
    std::erase_if(cl.draining,
                  [](const std::unique_ptr<Session>& d) { return d->client->in_flight() == 0; });
  }
}

bool ClusterSim::Run() {
  servers_.resize(s_.servers);
  for (int i = 0; i < s_.servers; ++i) {
    servers_[i].id = absl::StrCat("s", i + 1);
    if (!Start(servers_[i])) return false;
  }
  for (int c = 0; c < s_.clients; ++c) {
    client_internal::OpenOptions o;
    o.fabric_kind = "soft";
    o.scratch_bytes = 3 << 20;
    o.cache_entries = 1024;
    o.clock = [net = net_] { return absl::UnixEpoch() + absl::Microseconds(net->steps()); };
    o.fabric = net_->NewFabric();
    if (s_.faults.any()) {
      fabric::FaultOptions f = s_.faults;
      f.seed = net_->NextSeed();
      // Simulated time, which also ticks as the client polls, so that held
      // requests come due when nothing else runs.
      auto clock = [net = net_, ticks = std::make_shared<int64_t>(0)] {
        return absl::UnixEpoch() + absl::Microseconds(net->steps() + (*ticks)++);
      };
      o.fabric = fabric::InjectFaults(net_->NewFabric(), f, clock);
    }
    auto resources = client_internal::ClientResources::Create(o);
    EXPECT_TRUE(resources.ok()) << resources.status();
    if (!resources.ok()) return false;
    clients_.push_back({.options = o, .resources = *std::move(resources)});
  }
  constexpr int kSpins = 200'000;
  for (spin_ = 0; spin_ < kSpins; ++spin_) {
    bool busy = false;
    for (const SimClient& cl : clients_) {
      busy |= cl.issued < s_.ops_per_client || cl.outstanding > 0 || !cl.draining.empty();
    }
    if (!busy) return true;
    MaybeLose(nullptr);
    for (Server& sv : servers_) {
      // A lease runs out some spins after the loss; the server comes back
      // blank some spins later.
      if (sv.down_at >= 0 && sv.region == nullptr && spin_ == sv.down_at + 30) MarkDown(sv);
      if (sv.down_at >= 0 && spin_ >= sv.down_at + 60 && !Start(sv)) return false;
    }
    // Heartbeats, in a seeded order.
    if (rng_.Uniform(3) == 0) Exchange(servers_[rng_.Uniform(servers_.size())]);
    StepClients();
  }
  std::string stuck;
  for (const SimClient& cl : clients_) {
    absl::StrAppend(&stuck, "\n  client: issued ", cl.issued, ", outstanding ", cl.outstanding,
                    ", session ", cl.session ? cl.session->copies : "none", ", draining ",
                    cl.draining.size());
  }
  ADD_FAILURE() << "the operations did not complete in " << kSpins << " spins; group: "
                << (Group() ? server::ToProto(*Group()).ShortDebugString() : "none") << stuck;
  return false;
}

struct Search {
  uint64_t quick_seeds = 1000;
  uint64_t region_bytes = 0;
  fabric::FaultOptions faults;
};

void CheckSeeds(const Search& search) {
  // Seeds 1..N (RKV_SIM_SEEDS=N overrides N); RKV_SIM_SEED=S replays seed
  // S alone, with the groups' log. Empty is unset.
  auto number = [](const char* name) -> std::optional<uint64_t> {
    const char* env = std::getenv(name);
    if (env == nullptr || *env == '\0') return std::nullopt;
    return std::strtoull(env, nullptr, 10);
  };
  uint64_t seeds = number("RKV_SIM_SEEDS").value_or(search.quick_seeds);
  uint64_t first = 1;
  if (std::optional<uint64_t> one = number("RKV_SIM_SEED")) {
    first = *one;
    seeds = 1;
  } else {
    SetMinLogSeverity(LogSeverity::kError);
  }
  ASSERT_GT(seeds, 0u) << "RKV_SIM_SEEDS must be a positive number";
  int ops = 0, losses = 0, live_copies = 0, inconclusive = 0;
  std::map<absl::StatusCode, int> failures;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    Scenario s;
    s.replicas = 2 + seed % 2;
    s.servers = int(s.replicas) + 1;
    s.clients = 2 + int(seed / 2 % 2);
    s.mix.keys = 1 + int(seed / 4 % 3);
    s.mix.value_bytes = 600;
    s.faults = search.faults;
    s.region_bytes = search.region_bytes;
    ClusterSim sim(seed, s);
    ASSERT_TRUE(sim.Run()) << "seed " << seed << " (replay: RKV_SIM_SEED=" << seed << ")";
    std::vector<lin::Operation> history = sim.history();
    ASSERT_EQ(history.size(), size_t(s.clients * s.ops_per_client)) << "seed " << seed;
    for (const auto& [code, n] : sim.failures()) failures[code] += n;
    const lin::CheckResult r = lin::Check(history);
    if (r.gave_up) {
      ++inconclusive;
      continue;
    }
    ASSERT_TRUE(r.linearizable) << "seed " << seed << " (replay: RKV_SIM_SEED=" << seed << ")\n"
                                << lin::ShortestFailingPrefix(history);
    ops += int(history.size());
    losses += sim.losses();
    live_copies += sim.live_copies();
  }
  EXPECT_LE(inconclusive * 100, int(seeds)) << "over 1 % of seeds inconclusive";
  // The runs must have done what they are for.
  EXPECT_GE(losses, int(seeds)) << "few servers were lost";
  EXPECT_GE(live_copies, int(seeds)) << "few spares were copied in live";
  // An operation fails only because a copy it needed went away (or, with
  // faults, a request did): never for want of heap, which every settle
  // reclaims, nor for anything the copies hold.
  std::string failed;
  for (const auto& [code, n] : failures) {
    absl::StrAppend(&failed, failed.empty() ? "" : ", ", absl::StatusCodeToString(code), " ", n);
    EXPECT_TRUE(code == absl::StatusCode::kUnavailable ||
                code == absl::StatusCode::kDeadlineExceeded)
        << n << " operations failed with " << absl::StatusCodeToString(code);
  }
  std::cout << seeds << " seeds: " << ops
            << " operations checked linearizable (failed: " << (failed.empty() ? "none" : failed)
            << "), " << losses << " servers lost with their memory, " << live_copies
            << " live copies, " << inconclusive << " seeds inconclusive\n";
}

// Small regions, and values of 600 bytes: the writes of a seed take the
// heap over (about 88 KiB of 118 KiB) while a configuration's take a
// third of it, so that clients live on what each settle reclaims into the
// free pool. (With 94 KiB, one schedule in a thousand seeds or so filled
// it between two settles.)
TEST(ClusterSimulationTest, LinearizableWhileServersAreLostAndCopiedIn) {
  CheckSeeds({.region_bytes = 160 << 10});
}

TEST(ClusterSimulationTest, LinearizableUnderFaultsWhileServersAreLostAndCopiedIn) {
  fabric::FaultOptions faults;
  faults.delay_probability = 0.05;
  faults.max_delay = absl::Microseconds(300);
  faults.fail_probability = 0.01;
  faults.drop_probability = 0.002;
  // Roomier regions: a session that fails strands the heap it had reserved
  // until the next settle, and faults fail many.
  CheckSeeds({.quick_seeds = 500, .region_bytes = 1 << 20, .faults = faults});
}

}  // namespace
}  // namespace rkv::testing
