#include "common/fabric/soft/soft_fabric.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/fabric/memory_table.h"
#include "common/fabric/soft/soft_queue_pair.h"
#include "common/fabric/soft/soft_tcp.h"
#include "common/fabric/soft/soft_transport.h"

namespace rkv::fabric {
namespace {

class SoftMemoryRegion final : public MemoryRegion {
 public:
  SoftMemoryRegion(std::shared_ptr<MemoryTable> table, void* addr, size_t length, uint32_t lkey,
                   uint32_t rkey, uint32_t access)
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
  SoftFabric(std::shared_ptr<SoftTransport> transport, absl::Duration busy_poll)
      : transport_(std::move(transport)),
        busy_poll_(busy_poll),
        // Keys must differ across restarts (a stale rkey must not open the
        // new region), yet replay under a simulation's seed.
        table_(std::make_shared<MemoryTable>(transport_ ? transport_->NextSeed() : EntropySeed())) {
  }

  FabricKind kind() const override { return FabricKind::kSoft; }

  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                               uint32_t access) override {
    if (addr == nullptr || length == 0) {
      return absl::InvalidArgumentError("RegisterMemory: empty range");
    }
    if ((access & ~kAllAccess) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("RegisterMemory: unknown access bits ", access));
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
    if (transport_) return transport_->Listen(table_, options);
    return ListenSoftTcp(table_, options, busy_poll_);
  }

  absl::StatusOr<std::shared_ptr<CompletionChannel>> NewCompletionChannel() override {
    if (transport_) return transport_->NewCompletionChannel();
    return NewSoftTcpCompletionChannel(busy_poll_);
  }

  absl::StatusOr<std::unique_ptr<QueuePair>> Connect(const Endpoint& endpoint,
                                                     const QueuePairOptions& options) override {
    if (options.max_send_wr == 0) {
      return absl::InvalidArgumentError("Connect: max_send_wr must be positive");
    }
    if (options.channel != nullptr &&
        dynamic_cast<SoftCompletionChannel*>(options.channel.get()) == nullptr) {
      return absl::InvalidArgumentError("Connect: the completion channel is another fabric's");
    }
    if (transport_) return transport_->Connect(table_, endpoint, options);
    return ConnectSoftTcp(table_, endpoint, options, busy_poll_);
  }

 private:
  const std::shared_ptr<SoftTransport> transport_;
  const absl::Duration busy_poll_;  // TCP only: a simulation never sleeps.
  const std::shared_ptr<MemoryTable> table_;
};

}  // namespace

std::unique_ptr<Fabric> OpenSoftFabric(std::shared_ptr<SoftTransport> transport,
                                       absl::Duration busy_poll) {
  return std::make_unique<SoftFabric>(std::move(transport), busy_poll);
}

}  // namespace rkv::fabric
