// How a soft fabric's requests travel when not over TCP: a network that
// carries the soft initiator's queue pairs (soft_queue_pair.h) to soft
// targets by other means — the deterministic simulation
// (common/fabric/sim/sim_network.h) is one. The soft Fabric holds one and
// knows nothing more of it, so that the simulation sits above the soft
// backend and not beside it.
#ifndef RKV_COMMON_FABRIC_SOFT_SOFT_TRANSPORT_H_
#define RKV_COMMON_FABRIC_SOFT_SOFT_TRANSPORT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/fabric/fabric.h"
#include "common/fabric/memory_table.h"

namespace rkv::fabric {

class SoftTransport {
 public:
  virtual ~SoftTransport() = default;

  // A seed for a node's own choices (its memory keys), so that they
  // replay from the transport's seed.
  virtual uint64_t NextSeed() = 0;
  virtual std::shared_ptr<CompletionChannel> NewCompletionChannel() = 0;
  virtual absl::StatusOr<std::unique_ptr<Listener>> Listen(std::shared_ptr<const MemoryTable> table,
                                                           const ListenOptions& options) = 0;
  virtual absl::StatusOr<std::unique_ptr<QueuePair>> Connect(
      std::shared_ptr<const MemoryTable> local, const Endpoint& endpoint,
      const QueuePairOptions& options) = 0;
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SOFT_SOFT_TRANSPORT_H_
