// The command-line flags that choose and configure the fabric, shared by
// every program that opens one: --fabric, --rdma_device, --fabric_faults,
// --soft_busy_poll.
#ifndef RKV_COMMON_FABRIC_FABRIC_FLAGS_H_
#define RKV_COMMON_FABRIC_FABRIC_FLAGS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/fabric/fabric.h"

namespace rkv::fabric {

// FabricOptions as the flags say; InvalidArgument for a bad value.
absl::StatusOr<FabricOptions> FabricOptionsFromFlags();

// Opens the fabric the flags choose, with --fabric_faults injected into
// what its queue pairs post.
absl::StatusOr<std::unique_ptr<Fabric>> OpenFabricFromFlags();

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_FABRIC_FLAGS_H_
