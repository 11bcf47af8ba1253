#include "tests/common/fabric/verbs_test_setup.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/fabric/fabric.h"

namespace rkv::fabric::testing {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

}  // namespace

absl::StatusOr<VerbsTestSetup> VerbsTestSetupFromEnv() {
  VerbsTestSetup setup;
  setup.address = EnvOr("RKV_VERBS_TEST_ADDRESS", "");
  setup.target_device = EnvOr("RKV_VERBS_TEST_DEVICE", "");
  setup.initiator_device = EnvOr("RKV_VERBS_TEST_INITIATOR_DEVICE", setup.target_device);
  absl::Status why;
  absl::StatusOr<std::unique_ptr<Fabric>> probe =
      OpenFabric({.kind = FabricKind::kVerbs, .rdma_device = setup.target_device});
  if (!probe.ok()) {
    why = absl::UnavailableError(absl::StrCat("verbs backend: ", probe.status().message()));
  } else if (setup.address.empty()) {
    why = absl::UnavailableError(
        "verbs backend: an RDMA device exists; set RKV_VERBS_TEST_ADDRESS to an IPv4 "
        "address of an RDMA interface (host:0) to run the verbs tests on it");
  }
  if (why.ok()) return setup;
  if (std::getenv("RKV_REQUIRE_VERBS") != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("RKV_REQUIRE_VERBS is set, but ", why.message()));
  }
  return why;
}

}  // namespace rkv::fabric::testing
