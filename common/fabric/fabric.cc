#include "common/fabric/fabric.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fabric/soft/soft_fabric.h"
#include "common/fabric/verbs/verbs_fabric.h"
#include "common/logging.h"

namespace rkv::fabric {

const char* FabricKindName(FabricKind kind) {
  switch (kind) {
    case FabricKind::kAuto:
      return "auto";
    case FabricKind::kVerbs:
      return "verbs";
    case FabricKind::kSoft:
      return "soft";
  }
  return "unknown";
}

absl::StatusOr<FabricKind> ParseFabricKind(absl::string_view text) {
  if (text == "auto") return FabricKind::kAuto;
  if (text == "verbs") return FabricKind::kVerbs;
  if (text == "soft") return FabricKind::kSoft;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown fabric '", text, "': want auto, verbs or soft"));
}

absl::StatusOr<std::unique_ptr<Fabric>> OpenFabric(const FabricOptions& options) {
  switch (options.kind) {
    case FabricKind::kSoft:
      return OpenSoftFabric(nullptr, options.soft_busy_poll);
    case FabricKind::kVerbs:
      return OpenVerbsFabric(options);
    case FabricKind::kAuto: {
      absl::StatusOr<std::unique_ptr<Fabric>> verbs = OpenVerbsFabric(options);
      if (verbs.ok() || !absl::IsFailedPrecondition(verbs.status())) return verbs;
      RKV_LOG(INFO) << "no RDMA device; using the soft fabric over TCP";
      return OpenSoftFabric(nullptr, options.soft_busy_poll);
    }
  }
  return absl::InvalidArgumentError("unknown fabric kind");
}

}  // namespace rkv::fabric
