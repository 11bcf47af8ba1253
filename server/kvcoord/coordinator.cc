#include "server/kvcoord/coordinator.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/socket.h"

namespace rkv::server {
namespace {

absl::Status Invalid(const std::string& why) { return absl::InvalidArgumentError(why); }

absl::Status ValidateId(const std::string& id) {
  if (id.empty() || id.size() > 64) return Invalid("server id must be 1 to 64 characters");
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return Invalid(
          absl::StrCat("server id '", id, "' may hold only letters, digits, '-', '_' and '.'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRegion(const proto::RegionDescriptor& r, bool simulated) {
  if (r.endpoint().kind() != "soft" && r.endpoint().kind() != "verbs") {
    return Invalid(absl::StrCat("fabric kind '", r.endpoint().kind(), "': want soft or verbs"));
  }
  if (simulated && absl::StartsWith(r.endpoint().address(), "sim:")) {
    // The simulated fabric's node names (common/fabric/sim/).
  } else if (!ParseHostPort(r.endpoint().address()).ok() ||
             ParseHostPort(r.endpoint().address())->port == 0) {
    return Invalid(
        absl::StrCat("fabric address '", r.endpoint().address(), "' is not host:port with a port"));
  }
  if (r.base_address() == 0 || r.length() < 4096 || r.length() > (uint64_t{1} << 46)) {
    return Invalid("region base must be set and its length between 4 KiB and 64 TiB");
  }
  if (r.generation() == 0) return Invalid("region generation must be positive");
  return absl::OkStatus();
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(WithClock(std::move(options))), groups_(options_.replicas) {
  if (options_.lease_thread) lease_thread_ = std::thread([this] { LeaseLoop(); });
}

absl::Status Coordinator::Start(std::string id, std::string address,
                                std::unique_ptr<StateStore> store) {
  StateStore* s = store.get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    id_ = std::move(id);
    address_ = std::move(address);
    store_ = std::move(store);
  }
  if (absl::Status st = s->Start(*this); !st.ok()) return st;
  return status();
}

absl::Status Coordinator::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

Coordinator::~Coordinator() {
  Stop();
  if (lease_thread_.joinable()) lease_thread_.join();
}

void Coordinator::Stop() {
  StateStore* store;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    changed_.notify_all();
    store = store_.get();
  }
  if (store != nullptr) store->Stop();
}

bool Coordinator::LoadLocked(const proto::ClusterMap& state) {
  if (state.epoch() != 0 && std::max<uint32_t>(1, state.replicas()) != groups_.replicas()) {
    refused_ = absl::FailedPreconditionError(absl::StrCat(
        "the stored state is of a cluster of ", std::max<uint32_t>(1, state.replicas()),
        " copies, not the ", groups_.replicas(), " of --replicas"));
    return false;
  }
  ReplicaGroups groups(groups_.replicas());
  if (absl::Status s = groups.Load(state); !s.ok()) {
    refused_ = absl::DataLossError(
        absl::StrCat("the stored state holds a damaged replica group (", s.message(), ")"));
    return false;
  }
  groups_ = std::move(groups);
  std::map<std::string, ServerEntry> servers;
  const absl::Time now = Now();
  for (const proto::ServerInfo& s : state.servers()) {
    ServerEntry& e = servers[s.id()];
    e.info = s;
    e.info.clear_last_heard_ms();
    // Servers that are up get a whole lease, from now, to check in.
    e.last_heard = now;
    if (auto it = servers_.find(s.id()); it != servers_.end()) {
      e.chunk_hashes = std::move(it->second.chunk_hashes);
    }
  }
  servers_ = std::move(servers);
  epoch_ = state.epoch();
  term_ = state.term();
  loaded_ = true;
  changed_.notify_all();
  return true;
}

void Coordinator::OnLead(const proto::ClusterMap& state) {
  std::lock_guard<std::mutex> lock(mu_);
  // Leading a cluster it was not configured for would undo it: kvcoord
  // stops (status()).
  if (!LoadLocked(state)) return;
  RKV_LOG(INFO) << "leading (term " << term_ << ") with " << servers_.size() << " servers at epoch "
                << epoch_;
  // What changed while no coordinator led (a lease missed is not among
  // it: every lease starts again now).
  Saved before = SaveLocked();
  if (groups_.Update(ViewsLocked())) (void)CommitLocked(std::move(before));
}

void Coordinator::OnFollow(const proto::ClusterMap& state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (loaded_ && state.epoch() < epoch_) return;  // Older than what it has.
  (void)LoadLocked(state);
}

Leadership Coordinator::LeadershipLocked() const {
  // Stopping, it orders and renews nothing: the store hands the leadership
  // on at once, and every handler that passed this check has returned by
  // then (each holds the lock throughout).
  if (store_ == nullptr || !refused_.ok() || stopping_) return {};
  return store_->leadership();
}

absl::Status Coordinator::CheckLeading(const Leadership& l) const {
  if (store_ != nullptr && refused_.ok() && l.CanRenew(Now())) return absl::OkStatus();
  const std::string leader = store_ == nullptr ? "" : store_->LeaderAddress();
  absl::Status s = absl::UnavailableError(absl::StrCat(
      "coordinator ", id_, " does not lead", leader.empty() ? "" : "; the leader is at " + leader));
  if (!leader.empty() && leader != address_) s.SetPayload(kLeaderPayload, absl::Cord(leader));
  return s;
}

std::map<std::string, ServerView> Coordinator::ViewsLocked() const {
  std::map<std::string, ServerView> views;
  for (const auto& [id, e] : servers_) {
    views[id] = {e.info.state() == proto::SERVER_STATE_UP, e.info.region().generation(),
                 e.info.region().length(), e.info.lineage()};
  }
  return views;
}

bool Coordinator::CommitLocked(Saved before) {
  groups_.Update(ViewsLocked());
  epoch_++;
  const absl::Status s = store_->Commit(MapLocked());
  if (s.ok()) {
    commits_++;
    NoteGroupChangesLocked(before.groups);
    changed_.notify_all();
    return true;
  }
  commit_failures_++;
  RKV_LOG(WARNING) << "change not stored, undone (" << s.message() << ")";
  for (auto& [id, e] : before.servers) {
    if (auto it = servers_.find(id); it != servers_.end()) {
      e.last_heard = it->second.last_heard;
      *e.info.mutable_stats() = it->second.info.stats();
    }
  }
  servers_ = std::move(before.servers);
  groups_ = std::move(before.groups);
  epoch_ = before.epoch;
  return false;
}

proto::ClusterMap Coordinator::MapLocked() const {
  proto::ClusterMap map;
  map.set_epoch(epoch_);
  map.set_term(term_);
  map.set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  const absl::Time now = Now();
  for (const auto& [id, e] : servers_) {
    proto::ServerInfo* s = map.add_servers();
    *s = e.info;
    s->set_last_heard_ms(absl::ToInt64Milliseconds(now - e.last_heard));
  }
  groups_.Save(&map);
  return map;
}

absl::Status Coordinator::Register(const proto::RegisterRequest& req,
                                   proto::RegisterResponse* resp) {
  if (auto s = ValidateId(req.id()); !s.ok()) return s;
  if (auto s = ValidateRegion(req.region(), options_.simulated_fabric); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  const Leadership l = LeadershipLocked();
  if (auto s = CheckLeading(l); !s.ok()) return s;
  if (auto it = servers_.find(req.id());
      it != servers_.end() && req.region().generation() < it->second.info.region().generation()) {
    // Generations only grow for a server id. A lower one is a request that
    // came late or twice (its answer goes unread), and must not replace the
    // registration that followed it; or a server restarted on a clock set
    // back, which takes a generation above the one registered.
    resp->set_fence_above(it->second.info.region().generation());
    resp->set_term(l.term);
    return absl::OkStatus();
  }
  Saved before = SaveLocked();
  ServerEntry& e = servers_[req.id()];
  const bool known = e.info.id() == req.id();
  // The same memory as this server's registration we know (fenced, or its
  // region file reopened; or that very registration again, its answer
  // lost and the call retried): what it held then, it holds now.
  const bool same_memory = known && ((req.previous_generation() != 0 &&
                                      req.previous_generation() == e.info.region().generation()) ||
                                     req.region().generation() == e.info.region().generation());
  e.info.set_lineage(same_memory ? e.info.lineage() : req.region().generation());
  e.info.set_id(req.id());
  *e.info.mutable_region() = req.region();
  *e.info.mutable_stats() = req.stats();
  e.info.set_state(proto::SERVER_STATE_UP);
  e.last_heard = Now();
  e.chunk_hashes.assign(req.chunk_hashes().begin(), req.chunk_hashes().end());
  if (!CommitLocked(std::move(before))) {
    return absl::UnavailableError("the coordinator cannot store the registration now; try again");
  }
  RKV_LOG(INFO) << "server " << req.id() << (known ? " re-registered" : " joined") << " at "
                << req.region().endpoint().address() << " (" << req.region().endpoint().kind()
                << "), generation " << req.region().generation() << ", "
                << (req.region().length() >> 20) << " MiB; epoch " << epoch_;
  resp->set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  resp->set_epoch(epoch_);
  resp->set_replicas(groups_.replicas());
  resp->set_hurry(groups_.Reconfiguring(req.id()));
  resp->set_term(l.term);
  return absl::OkStatus();
}

absl::Status Coordinator::Heartbeat(const proto::HeartbeatRequest& req,
                                    proto::HeartbeatResponse* resp) {
  if (auto s = ValidateId(req.id()); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  const Leadership l = LeadershipLocked();
  if (auto s = CheckLeading(l); !s.ok()) return s;
  // Orders (fences, pushes, changes of state, and answers that make a
  // server register anew) only while no other coordinator can have taken
  // over; a renewal a little longer.
  auto can_order = [this] { return LeadershipLocked().CanOrder(Now()); };
  auto it = servers_.find(req.id());
  if (it == servers_.end() || it->second.info.region().generation() != req.generation()) {
    if (!can_order()) return CheckLeading({});
    if (it == servers_.end()) {
      return absl::NotFoundError("unknown server: register first");
    }
    return absl::FailedPreconditionError(
        absl::StrCat("generation ", req.generation(), " is not the registered ",
                     it->second.info.region().generation(), ": register again"));
  }
  ServerEntry& e = it->second;
  resp->set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  resp->set_term(l.term);
  if (e.info.state() != proto::SERVER_STATE_UP && groups_.replicas() > 1) {
    if (!can_order()) return CheckLeading({});
    // Its group went on without it: it must not serve a client that still
    // takes it for a member. It fences itself and registers anew.
    e.last_heard = Now();
    resp->set_fence(true);
    return absl::OkStatus();
  }
  e.last_heard = Now();
  *e.info.mutable_stats() = req.stats();
  SetCensusLocked(req.id(), req.generation(), resp);
  if (!can_order()) return absl::OkStatus();
  // Each change is stored before the next is considered; one refused
  // ends the exchange at the renewal (the store may no longer lead).
  if (e.info.state() != proto::SERVER_STATE_UP) {
    Saved before = SaveLocked();
    servers_.at(req.id()).info.set_state(proto::SERVER_STATE_UP);
    if (!CommitLocked(std::move(before))) return absl::OkStatus();
    RKV_LOG(INFO) << "server " << req.id() << " is back up; epoch " << epoch_;
  }
  if (req.has_push()) {
    Saved before = SaveLocked();
    if (groups_.OnProgress(req.id(), req.push(), ViewsLocked()) &&
        !CommitLocked(std::move(before))) {
      return absl::OkStatus();
    }
  }
  // From the moment the pusher is handed its push only its copy counts:
  // that must be stored first, or a coordinator leading after this one
  // could take a half-pushed target for a good copy. If it cannot be
  // stored, the group waits as it was (a push already under way goes on).
  std::map<std::string, ServerView> views = ViewsLocked();
  if (groups_.PushPending(req.id(), views)) {
    Saved before = SaveLocked();
    groups_.BeginPush(req.id(), views);
    if (!CommitLocked(std::move(before))) return absl::OkStatus();
    views = ViewsLocked();
  }
  // The commits took time: still no other coordinator?
  if (!can_order()) return absl::OkStatus();
  resp->set_fence(groups_.MustFence(req.id(), req.generation()));
  if (std::optional<proto::PushOrder> order = groups_.PushFor(req.id(), views)) {
    for (proto::ServerInfo& t : *order->mutable_targets()) {
      ServerEntry& target = servers_.at(t.id());
      t = target.info;
      // A fenced target registered since the reconfiguration began, with
      // the hashes of what it held then. They are handed out once: the
      // push changes what they describe, and a push started again (the
      // pusher fenced on its own, say) copies the target whole. (A live
      // copy's spare may have been written since it registered.)
      proto::ChunkHashes* h = order->add_target_hashes();
      if (!order->live()) {
        h->mutable_hashes()->Assign(target.chunk_hashes.begin(), target.chunk_hashes.end());
        target.chunk_hashes.clear();
      }
    }
    *resp->mutable_push() = *std::move(order);
  }
  SetCensusLocked(req.id(), req.generation(), resp);
  resp->set_hurry(groups_.Reconfiguring(req.id()));
  return absl::OkStatus();
}

void Coordinator::SetCensusLocked(const std::string& id, uint64_t generation,
                                  proto::HeartbeatResponse* resp) const {
  resp->clear_census();
  resp->clear_census_backups();
  if (groups_.replicas() < 2) return;
  const ReplicaGroup* g = groups_.ServingAsPrimary(id, generation);
  if (g == nullptr) return;
  for (size_t i = 1; i < g->members.size(); ++i) {
    auto it = servers_.find(g->members[i].id);
    // A member registered anew: the group reconfigures.
    if (it == servers_.end() || it->second.info.region().generation() != g->members[i].generation) {
      resp->clear_census_backups();
      return;
    }
    *resp->add_census_backups() = it->second.info.region();
  }
  resp->set_census(true);
}

absl::Status Coordinator::Deregister(const proto::DeregisterRequest& req) {
  if (auto s = ValidateId(req.id()); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = CheckLeading(LeadershipLocked()); !s.ok()) return s;
  auto it = servers_.find(req.id());
  if (it == servers_.end() || it->second.info.region().generation() != req.generation()) {
    return absl::NotFoundError("no such server registration");
  }
  // Kept, marked down: its keys stay placed on it until it returns.
  Saved before = SaveLocked();
  it->second.info.set_state(proto::SERVER_STATE_DOWN);
  if (!CommitLocked(std::move(before))) {
    return absl::UnavailableError("the coordinator cannot store it now");
  }
  RKV_LOG(INFO) << "server " << req.id() << " left; epoch " << epoch_;
  return absl::OkStatus();
}

absl::Status Coordinator::GetClusterMap(proto::ClusterMap* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!loaded_) {
    return absl::UnavailableError("this coordinator has not read the cluster's state yet");
  }
  *resp = MapLocked();
  return absl::OkStatus();
}

void Coordinator::NoteGroupChangesLocked(const ReplicaGroups& before) {
  const absl::Time now = Now();
  std::map<std::string, const ReplicaGroup*> was;
  for (const ReplicaGroup& g : before.groups()) was[g.id] = &g;
  // A time ended: observed, and forgotten.
  const auto end = [now](std::map<std::string, absl::Time>& since, const std::string& id,
                         MetricHistogram& h) {
    if (auto it = since.find(id); it != since.end()) {
      h.Observe(absl::ToDoubleSeconds(now - it->second));
      since.erase(it);
    }
  };
  for (const ReplicaGroup& g : groups_.groups()) {
    const auto it = was.find(g.id);
    const bool reconfiguring = g.state == GroupState::kReconfiguring;
    const bool was_reconfiguring =
        it != was.end() && it->second->state == GroupState::kReconfiguring;
    if (reconfiguring && !was_reconfiguring) {
      reconfigurations_++;
      reconfiguring_since_[g.id] = now;
    } else if (!reconfiguring && was_reconfiguring) {
      end(reconfiguring_since_, g.id, reconfiguration_seconds_);
    }
    const bool copying = !g.copying.empty();
    const bool was_copying = it != was.end() && !it->second->copying.empty();
    if (copying && !was_copying) {
      copying_since_[g.id] = now;
    } else if (!copying && was_copying) {
      end(copying_since_, g.id, live_copy_seconds_);
    }
  }
}

Coordinator::Snapshot Coordinator::MetricsSnapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  if (loaded_) s.map = MapLocked();
  s.leading = LeadershipLocked().CanRenew(Now());
  s.commits = commits_;
  s.commit_failures = commit_failures_;
  s.reconfigurations = reconfigurations_;
  s.reconfiguration_seconds = reconfiguration_seconds_;
  s.live_copy_seconds = live_copy_seconds_;
  return s;
}

absl::StatusOr<std::optional<proto::ClusterMap>> Coordinator::NextMap(uint64_t after_epoch,
                                                                      absl::Duration wait) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto ready = [&] { return stopping_ || (loaded_ && epoch_ > after_epoch); };
  // Not even a wait of no time when it need not wait: the simulation asks
  // without waiting, and often.
  if (!ready() && wait > absl::ZeroDuration()) {
    changed_.wait_for(lock, absl::ToChronoMilliseconds(wait), ready);
  }
  if (stopping_) return absl::UnavailableError("coordinator stopping");
  // Cut off from the state: the client follows another coordinator.
  if (store_ != nullptr && !store_->Current()) {
    return absl::UnavailableError("this coordinator has lost touch with the cluster's state");
  }
  if (!loaded_ || epoch_ <= after_epoch) return std::nullopt;
  return MapLocked();
}

absl::Status Coordinator::Describe(proto::CoordinatorStatus* resp) {
  StateStore* store;
  Leadership l;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (store_ == nullptr) return absl::UnavailableError("starting");
    store = store_.get();  // Never replaced once set.
    l = LeadershipLocked();
    resp->set_id(id_);
    resp->set_address(address_);
    resp->set_ready(loaded_ && store->Current());
  }
  StoreDescription d = store->Describe();
  resp->set_leading(l.CanRenew(Now()));
  resp->set_term(l.term);
  resp->set_leader_address(resp->leading() ? resp->address() : d.leader_address);
  resp->set_store(d.kind);
  for (proto::StoreMember& m : d.members) *resp->add_store_members() = std::move(m);
  return absl::OkStatus();
}

void Coordinator::LeaseLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    changed_.wait_for(lock, absl::ToChronoMilliseconds(options_.lease / 4));
    CheckLeasesLocked();
  }
}

void Coordinator::CheckLeases() {
  std::lock_guard<std::mutex> lock(mu_);
  CheckLeasesLocked();
}

void Coordinator::CheckLeasesLocked() {
  const absl::Time now = Now();
  if (stopping_ || !LeadershipLocked().CanOrder(now)) return;
  Saved before = SaveLocked();
  std::vector<std::string> missed;
  for (auto& [id, e] : servers_) {
    if (e.info.state() == proto::SERVER_STATE_UP && now - e.last_heard > options_.lease) {
      e.info.set_state(proto::SERVER_STATE_DOWN);
      missed.push_back(absl::StrCat(id, " (", absl::ToInt64Milliseconds(now - e.last_heard),
                                    " ms since last heard)"));
    }
  }
  if (missed.empty() || !CommitLocked(std::move(before))) return;
  RKV_LOG(WARNING) << "missed their leases, marked down: " << absl::StrJoin(missed, ", ")
                   << "; epoch " << epoch_;
}

}  // namespace rkv::server
