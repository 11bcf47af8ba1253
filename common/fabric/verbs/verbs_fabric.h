// The verbs backend: RDMA hardware through rdma-core's libibverbs, with
// reliable-connected queue pairs set up by librdmacm.
#ifndef RKV_COMMON_FABRIC_VERBS_VERBS_FABRIC_H_
#define RKV_COMMON_FABRIC_VERBS_VERBS_FABRIC_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/fabric/fabric.h"

namespace rkv::fabric {

// Opens the device options.rdma_device names (the first one if empty). No
// device at all, including kernels without RDMA support, where
// ibv_get_device_list fails with ENOSYS, is FailedPrecondition with a
// message naming --fabric=soft.
absl::StatusOr<std::unique_ptr<Fabric>> OpenVerbsFabric(const FabricOptions& options);

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_VERBS_VERBS_FABRIC_H_
