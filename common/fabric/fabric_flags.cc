#include "common/fabric/fabric_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
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

ABSL_FLAG(absl::Duration, soft_busy_poll, absl::ZeroDuration(),
          "soft: how long a wait for work spins before it sleeps (this program's waits "
          "for completions; in kvserver, the fabric's event loops), e.g. 50us. Saves "
          "a wake-up per round trip, but keeps a core busy per waiting thread: only "
          "with cores to spare. 0: sleep at once.");

namespace rkv::fabric {

absl::StatusOr<FabricOptions> FabricOptionsFromFlags() {
  FabricOptions options;
  RKV_ASSIGN_OR_RETURN(options.kind, ParseFabricKind(absl::GetFlag(FLAGS_fabric)));
  options.rdma_device = absl::GetFlag(FLAGS_rdma_device);
  options.soft_busy_poll = absl::GetFlag(FLAGS_soft_busy_poll);
  if (options.soft_busy_poll < absl::ZeroDuration() || options.soft_busy_poll > absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--soft_busy_poll=", absl::FormatDuration(options.soft_busy_poll), ": want 0 to 1s"));
  }
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
