// Where the verbs tests run: an address of an RDMA interface and the devices
// to use, from the environment (scripts/rdma-vm.sh sets them in its guest).
//
//   RKV_VERBS_TEST_ADDRESS            host:0 of the target's RDMA interface
//   RKV_VERBS_TEST_DEVICE             the target's device (default: the first)
//   RKV_VERBS_TEST_INITIATOR_DEVICE   the initiator's (default: the target's)
//   RKV_REQUIRE_VERBS                 set: not running is a failure, not a skip
#ifndef RKV_TESTS_COMMON_FABRIC_VERBS_TEST_SETUP_H_
#define RKV_TESTS_COMMON_FABRIC_VERBS_TEST_SETUP_H_

#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace rkv::fabric::testing {

struct VerbsTestSetup {
  std::string address;
  std::string target_device;
  std::string initiator_device;
};

// Unavailable (the message says why) where verbs cannot run here, or
// FailedPrecondition where RKV_REQUIRE_VERBS says it must.
absl::StatusOr<VerbsTestSetup> VerbsTestSetupFromEnv();

// For a test's SetUp: skip on Unavailable, fail on anything else.
#define RKV_SKIP_OR_FAIL(status)                                         \
  do {                                                                   \
    if (absl::IsUnavailable(status)) GTEST_SKIP() << (status).message(); \
    FAIL() << (status);                                                  \
  } while (0)

}  // namespace rkv::fabric::testing

#endif  // RKV_TESTS_COMMON_FABRIC_VERBS_TEST_SETUP_H_
