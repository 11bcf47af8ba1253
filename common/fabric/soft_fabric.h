// The soft backend: a virtual NIC in software, over TCP or, for a node of a
// SimNetwork, in its deterministic in-process network.
#ifndef RKV_COMMON_FABRIC_SOFT_FABRIC_H_
#define RKV_COMMON_FABRIC_SOFT_FABRIC_H_

#include <memory>

#include "common/fabric/fabric.h"

namespace rkv::fabric {

class SimNetwork;

// `sim`: null for TCP. `busy_poll`: FabricOptions::soft_busy_poll.
std::unique_ptr<Fabric> OpenSoftFabric(std::shared_ptr<SimNetwork> sim,
                                       absl::Duration busy_poll = absl::ZeroDuration());

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SOFT_FABRIC_H_
