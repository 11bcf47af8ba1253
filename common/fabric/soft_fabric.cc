#include "common/fabric/soft_fabric.h"

#include <atomic>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/fabric/memory_table.h"
#include "common/fabric/sim_network.h"
#include "common/fabric/soft_tcp.h"

namespace rkv::fabric {
namespace {

class SoftMemoryRegion final : public MemoryRegion {
 public:
  SoftMemoryRegion(std::shared_ptr<MemoryTable> table, void* addr, size_t length,
                   uint32_t lkey, uint32_t rkey, uint32_t access)
      : MemoryRegion(addr, length, lkey, rkey, access), table_(std::move(table)) {}
  ~SoftMemoryRegion() override { table_->Remove(lkey(), rkey()); }

 private:
  const std::shared_ptr<MemoryTable> table_;
};

uint64_t EntropySeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

class SoftFabric final : public Fabric {
 public:
  explicit SoftFabric(const FabricOptions& options)
      : options_(options),
        // Keys must differ across restarts (a stale rkey must not open the
        // new region), yet replay under the simulation's seed.
        table_(std::make_shared<MemoryTable>(options.sim ? options.sim->NextSeed()
                                                         : EntropySeed())),
        fault_seed_base_(options.faults.seed * 0x9E3779B97F4A7C15ULL) {}

  FabricKind kind() const override { return FabricKind::kSoft; }

  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                               uint32_t access) override {
    if (addr == nullptr || length == 0) {
      return absl::InvalidArgumentError("RegisterMemory: empty range");
    }
    if ((access & ~kAllAccess) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("RegisterMemory: unknown access bits ",
                                                     access));
    }
    if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite)) {
      // The same rule ibv_reg_mr enforces.
      return absl::InvalidArgumentError(
          "RegisterMemory: remote write or atomic access requires local write access");
    }
    auto [lkey, rkey] = table_->Add(addr, length, access);
    return std::unique_ptr<MemoryRegion>(
        std::make_unique<SoftMemoryRegion>(table_, addr, length, lkey, rkey, access));
  }

  absl::StatusOr<std::unique_ptr<Listener>> Listen(const ListenOptions& options) override {
    if (options_.sim) return options_.sim->Listen(table_, options);
    return ListenSoftTcp(table_, options);
  }

  absl::StatusOr<std::unique_ptr<QueuePair>> Connect(const Endpoint& endpoint,
                                                     const QueuePairOptions& options) override {
    if (options.max_send_wr == 0) {
      return absl::InvalidArgumentError("Connect: max_send_wr must be positive");
    }
    const uint64_t fault_seed = fault_seed_base_ + next_qp_.fetch_add(1);
    if (options_.sim) {
      return options_.sim->Connect(table_, endpoint, options, options_.faults, fault_seed);
    }
    return ConnectSoftTcp(table_, endpoint, options, options_.faults, fault_seed);
  }

 private:
  const FabricOptions options_;
  const std::shared_ptr<MemoryTable> table_;
  const uint64_t fault_seed_base_;
  std::atomic<uint64_t> next_qp_{0};
};

}  // namespace

std::unique_ptr<Fabric> OpenSoftFabric(const FabricOptions& options) {
  return std::make_unique<SoftFabric>(options);
}

}  // namespace rkv::fabric
