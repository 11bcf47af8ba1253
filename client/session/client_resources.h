// What every server's session of one client shares: the fabric, the
// registered scratch memory operations borrow their buffers from, the slot
// cache, and the completion channel all their queue pairs notify. A client
// of one region has them to itself; a cluster client has one set for all
// its servers, however many there are.
#ifndef RKV_CLIENT_SESSION_CLIENT_RESOURCES_H_
#define RKV_CLIENT_SESSION_CLIENT_RESOURCES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/session/open_options.h"
#include "client/session/scratch_arena.h"
#include "client/session/slot_cache.h"
#include "common/fabric/fabric.h"

namespace rkv::client_internal {

class ClientResources {
 public:
  // Opens the fabric unless `options.fabric` is given, and registers
  // `options.scratch_bytes` of scratch memory.
  static absl::StatusOr<std::shared_ptr<ClientResources>> Create(const OpenOptions& options);

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

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SESSION_CLIENT_RESOURCES_H_
