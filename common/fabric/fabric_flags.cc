#include "common/fabric/fabric_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/status.h"

ABSL_FLAG(std::string, fabric, "auto",
          "One-sided fabric: 'verbs' (RDMA hardware via rdma-core), 'soft' (software "
          "RDMA over TCP, for machines without RDMA), or 'auto' (verbs when an RDMA "
          "device exists, soft otherwise).");
ABSL_FLAG(std::string, rdma_device, "",
          "verbs: RDMA device to use, as ibv_devices lists it (default: the first).");
ABSL_FLAG(std::string, fabric_faults, "",
          "soft: inject faults into posted requests, e.g. "
          "'delay=0.01,max_delay=2ms,drop=0.001,fail=0.001,seed=7'. delay: the target "
          "waits up to max_delay first; drop: the connection breaks; fail: the request "
          "fails with 'retry exceeded', executed or not. Empty: none.");

namespace rkv::fabric {

absl::StatusOr<FabricOptions> FabricOptionsFromFlags() {
  FabricOptions options;
  RKV_ASSIGN_OR_RETURN(options.kind, ParseFabricKind(absl::GetFlag(FLAGS_fabric)));
  options.rdma_device = absl::GetFlag(FLAGS_rdma_device);
  RKV_ASSIGN_OR_RETURN(options.faults, ParseFaultOptions(absl::GetFlag(FLAGS_fabric_faults)));
  return options;
}

}  // namespace rkv::fabric
