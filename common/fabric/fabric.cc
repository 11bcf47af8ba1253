#include "common/fabric/fabric.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/fabric/soft_fabric.h"
#include "common/fabric/verbs_fabric.h"
#include "common/logging.h"

namespace rkv::fabric {

const char* FabricKindName(FabricKind kind) {
  switch (kind) {
    case FabricKind::kAuto: return "auto";
    case FabricKind::kVerbs: return "verbs";
    case FabricKind::kSoft: return "soft";
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

absl::StatusOr<FaultOptions> ParseFaultOptions(absl::string_view text) {
  FaultOptions faults;
  if (text.empty()) return faults;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("fault spec '", item, "': ", why));
    };
    if (kv.size() != 2) return bad("want name=value");
    const absl::string_view name = kv[0], value = kv[1];
    if (name == "seed") {
      if (!absl::SimpleAtoi(value, &faults.seed)) return bad("seed is not an integer");
    } else if (name == "max_delay") {
      if (!absl::ParseDuration(value, &faults.max_delay) ||
          faults.max_delay <= absl::ZeroDuration() || faults.max_delay > absl::Seconds(10)) {
        return bad("want a duration in (0, 10s], e.g. 2ms");
      }
    } else {
      double p;
      if (!absl::SimpleAtod(value, &p) || p < 0 || p > 1) return bad("want a probability in [0, 1]");
      if (name == "delay") {
        faults.delay_probability = p;
      } else if (name == "drop") {
        faults.drop_probability = p;
      } else if (name == "fail") {
        faults.fail_probability = p;
      } else {
        return bad("unknown fault; known: delay, drop, fail, max_delay, seed");
      }
    }
  }
  return faults;
}

absl::StatusOr<std::unique_ptr<Fabric>> OpenFabric(const FabricOptions& options) {
  switch (options.kind) {
    case FabricKind::kSoft:
      return OpenSoftFabric(options);
    case FabricKind::kVerbs:
      return OpenVerbsFabric(options);
    case FabricKind::kAuto: {
      if (options.sim) return OpenSoftFabric(options);
      absl::StatusOr<std::unique_ptr<Fabric>> verbs = OpenVerbsFabric(options);
      if (verbs.ok() || !absl::IsFailedPrecondition(verbs.status())) return verbs;
      RKV_LOG(INFO) << "no RDMA device; using the soft fabric over TCP";
      return OpenSoftFabric(options);
    }
  }
  return absl::InvalidArgumentError("unknown fabric kind");
}

}  // namespace rkv::fabric
