// An in-process network for the soft fabric whose every choice comes from
// one seeded generator, so that a race or a failure found once replays
// exactly from its seed.
//
// The fabrics NewFabric() returns are its nodes:
// their listeners and queue pairs live here instead of on TCP. Nothing runs
// in the background. Requests advance only when some queue pair polls: each
// Poll (and each round of Wait) runs a slice of scheduler steps, and each
// step picks a queue pair with work at random and executes one chunk of its
// oldest request. So queue pairs interleave at chunk granularity (a READ can
// observe a WRITE of another queue pair half done), while requests of one
// queue pair stay in order.
//
// Determinism holds when one thread drives everything (posts and polls);
// the network is thread-safe but other threads make the order their own.
#ifndef RKV_COMMON_FABRIC_SIM_SIM_NETWORK_H_
#define RKV_COMMON_FABRIC_SIM_SIM_NETWORK_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/fabric/fabric.h"
#include "common/fabric/memory_table.h"
#include "common/fabric/peer_departures.h"
#include "common/fabric/served_tally.h"
#include "common/fabric/soft/soft_transport.h"
#include "common/random.h"

namespace rkv::fabric {

struct SimOptions {
  // Bytes of a READ or WRITE executed per step.
  uint32_t chunk_bytes = 64;
  // Each Poll runs between 1 and this many steps.
  uint32_t max_steps_per_poll = 8;
};

class SimQueuePair;

// Create with std::make_shared: listeners and queue pairs keep it alive.
class SimNetwork : public SoftTransport, public std::enable_shared_from_this<SimNetwork> {
 public:
  explicit SimNetwork(uint64_t seed, SimOptions options = {});
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  uint64_t seed() const { return seed_; }
  const SimOptions& options() const { return options_; }

  // Runs steps until no queue pair has work; returns how many ran.
  uint64_t RunUntilIdle();
  // Steps run so far.
  uint64_t steps() const;

  // A new node: a soft fabric whose listeners and queue pairs live in this
  // network. It keeps the network alive.
  std::unique_ptr<Fabric> NewFabric();
  // A seed for a node's own choices (its keys, a client's generator), so
  // that they too replay from the network's seed.
  uint64_t NextSeed() override;

  // Node plumbing, used by the soft Fabric.
  std::shared_ptr<CompletionChannel> NewCompletionChannel() override;
  absl::StatusOr<std::unique_ptr<Listener>> Listen(std::shared_ptr<const MemoryTable> table,
                                                   const ListenOptions& options) override;
  absl::StatusOr<std::unique_ptr<QueuePair>> Connect(std::shared_ptr<const MemoryTable> local,
                                                     const Endpoint& endpoint,
                                                     const QueuePairOptions& options) override;

 private:
  friend class SimQueuePair;
  friend class SimCompletionChannel;
  friend class SimListener;

  struct ListenerEntry {
    std::weak_ptr<const MemoryTable> table;
    std::string token;
    uint64_t id = 0;
    absl::flat_hash_set<uint64_t> fenced;  // Peer ids Listener::Fence named.
    std::shared_ptr<PeerDepartures> departures;
    // Written under mu_ only (connects, steps, detaches): one writer at a
    // time, as the tally asks.
    std::shared_ptr<ServedTally> served;
  };

  // Runs up to `max_steps` steps; returns how many ran.
  uint64_t RunSteps(uint64_t max_steps);
  uint64_t RunSlice();
  bool StepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveListener(const std::string& name, uint64_t id);
  // Listener::Fence of the listener `name`, numbered `id`.
  void Fence(const std::string& name, uint64_t id, uint64_t peer_id);
  void Detach(SimQueuePair* qp);

  const uint64_t seed_;
  const SimOptions options_;
  mutable std::mutex mu_;
  Rng rng_ ABSL_GUARDED_BY(mu_);
  uint64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_listener_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, ListenerEntry> listeners_ ABSL_GUARDED_BY(mu_);
  // In creation order, so that choices depend only on the seed.
  std::vector<SimQueuePair*> queue_pairs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SIM_SIM_NETWORK_H_
