// The soft backend: a virtual NIC in software, over TCP or over another
// transport (soft_transport.h), such as the deterministic in-process network
// of a SimNetwork.
#ifndef RKV_COMMON_FABRIC_SOFT_SOFT_FABRIC_H_
#define RKV_COMMON_FABRIC_SOFT_SOFT_FABRIC_H_

#include <memory>

#include "common/fabric/fabric.h"

namespace rkv::fabric {

class SoftTransport;

// `transport`: null for TCP. `busy_poll`: FabricOptions::soft_busy_poll.
std::unique_ptr<Fabric> OpenSoftFabric(std::shared_ptr<SoftTransport> transport,
                                       absl::Duration busy_poll = absl::ZeroDuration());

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SOFT_SOFT_FABRIC_H_
