// What every server's session of one client shares: the fabric, the
// registered scratch memory operations borrow their buffers from, the slot
// cache, and the completion channel all their queue pairs notify. A client of one region has them to itself; a cluster client
// has one set for all its servers, however many there are.
#ifndef RKV_CLIENT_CLIENT_RESOURCES_H_
#define RKV_CLIENT_CLIENT_RESOURCES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/scratch_arena.h"
#include "client/slot_cache.h"
#include "client/testing.h"
#include "common/fabric/fabric.h"
#include "rkv/client.h"

namespace rkv::client_internal {

class ClientResources {
 public:
  // Opens the fabric unless `options.fabric` is given, and registers
  // `options.scratch_bytes` of scratch memory.
  static absl::StatusOr<std::shared_ptr<ClientResources>> Create(const ClientOptions& options);

  fabric::Fabric& fabric() { return *fabric_; }
  const std::shared_ptr<fabric::CompletionChannel>& channel() const { return channel_; }
  uint32_t lkey() const { return registered_->lkey(); }
  ScratchArena& scratch() { return arena_; }
  SlotCache& cache() { return cache_; }

 private:
  ClientResources(std::shared_ptr<fabric::Fabric> fabric, uint64_t scratch_bytes,
                  size_t cache_entries);

  const std::shared_ptr<fabric::Fabric> fabric_;
  std::shared_ptr<fabric::CompletionChannel> channel_;
  std::vector<uint8_t> memory_;
  std::unique_ptr<fabric::MemoryRegion> registered_;
  ScratchArena arena_;
  SlotCache cache_;
};

// A session with one server's region on shared resources: a Client whose
// queue pair, layout and heap allocator are its own. The sessions keep the
// resources alive, so their queue pairs go before the memory they write.
absl::StatusOr<std::unique_ptr<Client>> OpenSession(const fabric::RemoteRegion& region,
                                                    const ClientOptions& options,
                                                    const BrokenProtocol& broken,
                                                    std::shared_ptr<ClientResources> resources);
// The same for a region kept in several mirrored copies (Session::replicas),
// the primary first: one queue pair per copy, all on the resources'
// completion channel, and each round's share of a copy under one doorbell.
absl::StatusOr<std::unique_ptr<Client>> OpenReplicatedSession(
    const std::vector<fabric::RemoteRegion>& replicas, const ClientOptions& options,
    const BrokenProtocol& broken, std::shared_ptr<ClientResources> resources);

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLIENT_RESOURCES_H_
