#include "common/fabric/sim/sim_network.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/fabric/soft/soft_fabric.h"
#include "common/fabric/soft/soft_queue_pair.h"

namespace rkv::fabric {

class SimQueuePair final : public SoftQueuePair {
 public:
  SimQueuePair(std::shared_ptr<SimNetwork> net, std::shared_ptr<const MemoryTable> local,
               std::shared_ptr<const MemoryTable> target, uint64_t listener_id,
               std::shared_ptr<PeerDepartures> departures, std::shared_ptr<ServedTally> served,
               const QueuePairOptions& options)
      : SoftQueuePair(std::move(local), options),
        net_(std::move(net)),
        target_(std::move(target)),
        listener_id_(listener_id),
        departures_(std::move(departures)),
        served_(std::move(served)),
        peer_id_(options.peer_id) {
    departures_->Opened(peer_id_);
  }

  // Its requests not yet stepped are gone with it, as a crashed process's
  // are: the target sees the peer depart.
  ~SimQueuePair() override {
    net_->Detach(this);
    departures_->Closed(peer_id_);
  }

  size_t Poll(absl::Span<Completion> out) override {
    net_->RunSlice();
    return SoftQueuePair::Poll(out);
  }

  // Runs the network until this queue pair has a completion or nothing is
  // left to run. Time is simulated: the timeout does not apply.
  size_t Wait(absl::Span<Completion> out, absl::Duration) override {
    for (;;) {
      const size_t n = SoftQueuePair::Poll(out);
      if (n > 0 || net_->RunSlice() == 0) return n;
    }
  }

  uint64_t listener_id() const { return listener_id_; }
  uint64_t peer_id() const { return peer_id_; }
  // Its listener's; the network writes it under its mutex.
  ServedTally& served() const { return *served_; }

  bool HasWork() {
    std::lock_guard<std::mutex> lock(mu_);
    return !outstanding_.empty();
  }

  void Step(uint32_t chunk_bytes);

  void Disconnect() {
    std::lock_guard<std::mutex> lock(mu_);
    ConnectionLostLocked();
  }

 private:
  absl::Status Submit(std::vector<Pending> batch) override {
    std::lock_guard<std::mutex> lock(mu_);
    return AdmitLocked(batch);
  }

  const std::shared_ptr<SimNetwork> net_;
  const std::shared_ptr<const MemoryTable> target_;
  const uint64_t listener_id_;
  const std::shared_ptr<PeerDepartures> departures_;
  const std::shared_ptr<ServedTally> served_;
  const uint64_t peer_id_;
};

void SimQueuePair::Step(uint32_t chunk_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (outstanding_.empty()) return;
  Pending& p = outstanding_.front();
  const RemoteRequest req = p.remote();
  CompletionStatus status;
  switch (req.opcode) {
    case Opcode::kRead:
    case Opcode::kWrite: {
      const uint32_t n = std::min(chunk_bytes, req.length - p.progress);
      status = req.opcode == Opcode::kRead
                   ? ExecuteRead(*target_, req, p.progress, n,
                                 static_cast<uint8_t*>(p.wr.local) + p.progress)
                   : ExecuteWrite(*target_, req, p.progress, n, p.write_source() + p.progress);
      p.progress += n;
      if (status == CompletionStatus::kSuccess && p.progress < req.length) return;
      break;
    }
    case Opcode::kCas64:
    case Opcode::kFaa64: {
      uint64_t old = 0;
      status = ExecuteAtomic(*target_, req, &old);
      if (status == CompletionStatus::kSuccess) std::memcpy(p.wr.local, &old, 8);
      break;
    }
    default:
      status = CompletionStatus::kRemoteInvalidRequest;
  }
  if (status == CompletionStatus::kSuccess) served_->Served(req.opcode, req.length);
  CompleteFrontLocked(status, req.length);
}

// Waiting runs the network, as a queue pair's Wait does, until an attached
// queue pair completes something or nothing is left to run.
class SimCompletionChannel final : public SoftCompletionChannel {
 public:
  explicit SimCompletionChannel(std::shared_ptr<SimNetwork> net) : net_(std::move(net)) {}
  void Wait(absl::Duration) override {
    while (!TakePending() && net_->RunSlice() > 0) {
    }
  }

 private:
  const std::shared_ptr<SimNetwork> net_;
};

std::shared_ptr<CompletionChannel> SimNetwork::NewCompletionChannel() {
  return std::make_shared<SimCompletionChannel>(shared_from_this());
}

class SimListener final : public Listener {
 public:
  SimListener(std::shared_ptr<SimNetwork> net, std::string name, uint64_t id, std::string token,
              std::shared_ptr<PeerDepartures> departures, std::shared_ptr<const ServedTally> served)
      : net_(std::move(net)),
        name_(std::move(name)),
        id_(id),
        token_(std::move(token)),
        departures_(std::move(departures)),
        served_(std::move(served)) {}
  ~SimListener() override { net_->RemoveListener(name_, id_); }
  Endpoint endpoint() const override { return {absl::StrCat("sim:", name_), token_}; }
  absl::Status Fence(uint64_t peer_id) override {
    if (peer_id == 0) return absl::InvalidArgumentError("Fence: 0 names no peer");
    net_->Fence(name_, id_, peer_id);
    return absl::OkStatus();
  }
  std::vector<uint64_t> TakeDeparted() override { return departures_->Take(); }
  ListenerCounters counters() const override { return served_->Read(); }

 private:
  const std::shared_ptr<SimNetwork> net_;
  const std::string name_;
  const uint64_t id_;
  const std::string token_;
  const std::shared_ptr<PeerDepartures> departures_;
  const std::shared_ptr<const ServedTally> served_;
};

SimNetwork::SimNetwork(uint64_t seed, SimOptions options)
    : seed_(seed),
      options_{std::max(options.chunk_bytes, 1u), std::max(options.max_steps_per_poll, 1u)},
      rng_(seed) {}

uint64_t SimNetwork::NextSeed() {
  std::lock_guard<std::mutex> lock(mu_);
  return rng_.Next();
}

uint64_t SimNetwork::steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_;
}

absl::StatusOr<std::unique_ptr<Listener>> SimNetwork::Listen(
    std::shared_ptr<const MemoryTable> table, const ListenOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string name = options.address;
  if (name.empty() || name.back() == ':' || absl::EndsWith(name, ":0")) {
    // Like port 0: pick a name nobody holds.
    name = absl::StrCat("node", next_listener_id_);
  }
  if (listeners_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("sim address ", name, " is in use"));
  }
  const uint64_t id = next_listener_id_++;
  auto departures = std::make_shared<PeerDepartures>();
  auto served = std::make_shared<ServedTally>();
  listeners_[name] = {table, options.token, id, {}, departures, served};
  return std::unique_ptr<Listener>(std::make_unique<SimListener>(
      shared_from_this(), name, id, options.token, departures, served));
}

absl::StatusOr<std::unique_ptr<QueuePair>> SimNetwork::Connect(
    std::shared_ptr<const MemoryTable> local, const Endpoint& endpoint,
    const QueuePairOptions& options) {
  absl::string_view name = endpoint.address;
  if (!absl::ConsumePrefix(&name, "sim:")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", endpoint.address, "' is not a simulated address (sim:NAME)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = listeners_.find(name);
  std::shared_ptr<const MemoryTable> target =
      it == listeners_.end() ? nullptr : it->second.table.lock();
  if (target == nullptr) {
    return absl::UnavailableError(absl::StrCat("connect ", endpoint.address, ": nobody listens"));
  }
  if (!it->second.token.empty() && it->second.token != endpoint.token) {
    return absl::PermissionDeniedError(
        absl::StrCat("connect ", endpoint.address, ": connection token rejected"));
  }
  if (options.peer_id != 0 && it->second.fenced.contains(options.peer_id)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "connect ", endpoint.address, ": the target fenced peer id ", options.peer_id));
  }
  auto qp = std::make_unique<SimQueuePair>(shared_from_this(), std::move(local), std::move(target),
                                           it->second.id, it->second.departures, it->second.served,
                                           options);
  it->second.served->Accepted();
  queue_pairs_.push_back(qp.get());
  return std::unique_ptr<QueuePair>(std::move(qp));
}

void SimNetwork::RemoveListener(const std::string& name, uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.erase(name);
  for (SimQueuePair* qp : queue_pairs_) {
    if (qp->listener_id() == id) qp->Disconnect();
  }
}

void SimNetwork::Fence(const std::string& name, uint64_t id, uint64_t peer_id) {
  // Steps run under mu_, so none of the fenced queue pairs' requests is
  // part-way through a step here, and none steps again once they are
  // disconnected (a WRITE of several chunks may have landed in part).
  std::lock_guard<std::mutex> lock(mu_);
  auto it = listeners_.find(name);
  if (it != listeners_.end() && it->second.id == id) it->second.fenced.insert(peer_id);
  for (SimQueuePair* qp : queue_pairs_) {
    if (qp->listener_id() == id && qp->peer_id() == peer_id) qp->Disconnect();
  }
}

void SimNetwork::Detach(SimQueuePair* qp) {
  std::lock_guard<std::mutex> lock(mu_);
  qp->served().Closed();  // Here, under mu_, not racing a step's count.
  queue_pairs_.erase(std::remove(queue_pairs_.begin(), queue_pairs_.end(), qp), queue_pairs_.end());
}

bool SimNetwork::StepLocked() {
  std::vector<SimQueuePair*> runnable;
  for (SimQueuePair* qp : queue_pairs_) {
    if (qp->HasWork()) runnable.push_back(qp);
  }
  if (runnable.empty()) return false;
  runnable[rng_.Uniform(runnable.size())]->Step(options_.chunk_bytes);
  steps_++;
  return true;
}

uint64_t SimNetwork::RunSteps(uint64_t max_steps) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  while (n < max_steps && StepLocked()) n++;
  return n;
}

uint64_t SimNetwork::RunSlice() {
  uint64_t steps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    steps = 1 + rng_.Uniform(options_.max_steps_per_poll);
  }
  return RunSteps(steps);
}

uint64_t SimNetwork::RunUntilIdle() { return RunSteps(UINT64_MAX); }

std::unique_ptr<Fabric> SimNetwork::NewFabric() { return OpenSoftFabric(shared_from_this()); }

}  // namespace rkv::fabric
