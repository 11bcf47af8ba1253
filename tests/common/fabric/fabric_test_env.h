// Builds a two-node fabric setup (a target with registered memory and an
// initiator) for any backend, so that one test body runs on all of them.
#ifndef RKV_TESTS_COMMON_FABRIC_FABRIC_TEST_ENV_H_
#define RKV_TESTS_COMMON_FABRIC_FABRIC_TEST_ENV_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/fabric/fabric.h"
#include "common/fabric/faulty_fabric.h"
#include "common/fabric/sim/sim_network.h"

namespace rkv::fabric::testing {

// Page-aligned memory, zeroed.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t size);
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_;
  size_t size_;
};

// kSoftTcpBusyPoll: soft over TCP with FabricOptions::soft_busy_poll set,
// so that waits spin before they sleep.
enum class Backend { kSoftTcp, kSoftTcpBusyPoll, kSoftSim, kVerbs };
std::string BackendName(Backend b);
inline void PrintTo(Backend b, std::ostream* os) { *os << BackendName(b); }

struct EnvOptions {
  size_t remote_bytes = 8 << 20;
  size_t local_bytes = 8 << 20;
  uint64_t sim_seed = 1;
  SimOptions sim;
  FaultOptions initiator_faults;
  // The target's fabric too (its listener is the wrapper's).
  FaultOptions target_faults;
  std::string token = "conformance";
  // soft over TCP: the target's event loops (0: the default).
  uint32_t soft_threads = 0;
};

// A target node whose `remote` region grants every right, and an initiator
// node whose `local` region is registered for local writes.
class FabricTestEnv {
 public:
  // verbs: as VerbsTestSetupFromEnv says (Unavailable where it cannot run).
  static absl::StatusOr<std::unique_ptr<FabricTestEnv>> Create(Backend backend,
                                                               const EnvOptions& options = {});

  absl::StatusOr<std::unique_ptr<QueuePair>> Connect(const QueuePairOptions& options = {});
  // Connects naming `peer_id` to the listener (QueuePairOptions::peer_id),
  // which `listener->Fence(peer_id)` cuts off.
  absl::StatusOr<std::unique_ptr<QueuePair>> ConnectAs(uint64_t peer_id,
                                                       QueuePairOptions options = {});

  // Posts `batch` and waits for `expected` completions (10 s at most).
  // Returns what arrived; a test asserts on the count.
  std::vector<Completion> Run(QueuePair& qp, const std::vector<WorkRequest>& batch,
                              size_t expected);
  std::vector<Completion> Await(QueuePair& qp, size_t expected,
                                absl::Duration timeout = absl::Seconds(10));

  // Requests against the remote region at `offset`, with `local` buffers
  // that lie in the registered local region.
  WorkRequest Read(uint64_t id, uint64_t offset, uint8_t* local, uint32_t len) const;
  WorkRequest Write(uint64_t id, uint64_t offset, const uint8_t* local, uint32_t len) const;
  WorkRequest Cas(uint64_t id, uint64_t offset, uint64_t* old, uint64_t expect,
                  uint64_t desired) const;
  WorkRequest Faa(uint64_t id, uint64_t offset, uint64_t* old, uint64_t add) const;

  // Reads an 8-byte word of the remote region through a fresh queue pair.
  absl::StatusOr<uint64_t> ReadWord(uint64_t offset);

  Backend backend;
  std::shared_ptr<SimNetwork> sim;  // kSoftSim only.
  std::unique_ptr<Fabric> target;
  std::unique_ptr<Fabric> initiator;
  std::unique_ptr<AlignedBuffer> remote_mem;
  std::unique_ptr<AlignedBuffer> local_mem;
  std::unique_ptr<MemoryRegion> remote;
  std::unique_ptr<MemoryRegion> local;
  std::unique_ptr<Listener> listener;
};

}  // namespace rkv::fabric::testing

#endif  // RKV_TESTS_COMMON_FABRIC_FABRIC_TEST_ENV_H_
