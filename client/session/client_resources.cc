#include "client/session/client_resources.h"

#include "common/status.h"

namespace rkv::client_internal {

ClientResources::ClientResources(std::shared_ptr<fabric::Fabric> fabric, uint64_t scratch_bytes,
                                 size_t cache_entries)
    : fabric_(std::move(fabric)),
      memory_(scratch_bytes),
      arena_(memory_.data(), memory_.size()),
      cache_(cache_entries) {}

absl::StatusOr<std::shared_ptr<ClientResources>> ClientResources::Create(
    const OpenOptions& options) {
  if (options.scratch_bytes < (2u << 20) + 4096) {
    return absl::InvalidArgumentError("scratch_bytes must be at least 2 MiB + 4 KiB");
  }
  std::shared_ptr<fabric::Fabric> fabric = options.fabric;
  if (fabric == nullptr) {
    RKV_ASSIGN_OR_RETURN(const fabric::FabricKind kind,
                         fabric::ParseFabricKind(options.fabric_kind));
    RKV_ASSIGN_OR_RETURN(fabric,
                         fabric::OpenFabric({.kind = kind, .rdma_device = options.rdma_device}));
  }
  std::shared_ptr<ClientResources> r(
      new ClientResources(std::move(fabric), options.scratch_bytes, options.cache_entries));
  RKV_ASSIGN_OR_RETURN(r->channel_, r->fabric_->NewCompletionChannel());
  RKV_ASSIGN_OR_RETURN(
      r->registered_,
      r->fabric_->RegisterMemory(r->memory_.data(), r->memory_.size(), fabric::kLocalWrite));
  return r;
}

}  // namespace rkv::client_internal
