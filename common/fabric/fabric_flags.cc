#include "common/fabric/fabric_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/fabric/faulty_fabric.h"
#include "common/status.h"

ABSL_FLAG(std::string, fabric, "auto",
          "One-sided fabric: 'verbs' (RDMA hardware via rdma-core), 'soft' (software "
          "RDMA over TCP, for machines without RDMA), or 'auto' (verbs when an RDMA "
          "device exists, soft otherwise).");
ABSL_FLAG(std::string, rdma_device, "",
          "verbs: RDMA device to use, as ibv_devices lists it (default: the first).");
ABSL_FLAG(std::string, fabric_faults, "",
          "Inject faults into the requests this program posts (any fabric), e.g. "
          "'delay=0.01,max_delay=2ms,drop=0.001,fail=0.001,seed=7'. delay: held up to "
          "max_delay before it is sent; drop: the connection breaks; fail: the request "
          "fails with 'retry exceeded', executed or not. Empty: none.");

namespace rkv::fabric {

absl::StatusOr<FabricOptions> FabricOptionsFromFlags() {
  FabricOptions options;
  RKV_ASSIGN_OR_RETURN(options.kind, ParseFabricKind(absl::GetFlag(FLAGS_fabric)));
  options.rdma_device = absl::GetFlag(FLAGS_rdma_device);
  return options;
}

absl::StatusOr<std::unique_ptr<Fabric>> OpenFabricFromFlags() {
  RKV_ASSIGN_OR_RETURN(const FabricOptions options, FabricOptionsFromFlags());
  RKV_ASSIGN_OR_RETURN(const FaultOptions faults,
                       ParseFaultOptions(absl::GetFlag(FLAGS_fabric_faults)));
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<Fabric> fabric, OpenFabric(options));
  if (!faults.any()) return fabric;
  return InjectFaults(std::move(fabric), faults);
}

}  // namespace rkv::fabric
