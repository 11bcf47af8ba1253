// The soft backend: a virtual NIC in software. Over TCP by default; in the
// deterministic in-process network when FabricOptions::sim is set.
#ifndef RKV_COMMON_FABRIC_SOFT_FABRIC_H_
#define RKV_COMMON_FABRIC_SOFT_FABRIC_H_

#include <memory>

#include "common/fabric/fabric.h"

namespace rkv::fabric {

std::unique_ptr<Fabric> OpenSoftFabric(const FabricOptions& options);

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SOFT_FABRIC_H_
