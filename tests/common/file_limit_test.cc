// The open-file limit check, in child processes (a lowered hard limit
// cannot be raised again).
#include "common/file_limit.h"

#include <sys/resource.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace rkv {
namespace {

void SetLimits(rlim_t soft, rlim_t hard) {
  rlimit l{soft, hard};
  if (setrlimit(RLIMIT_NOFILE, &l) != 0) std::exit(10);
}

TEST(FileLimitTest, RaisesTheSoftLimitToTheHardOne) {
  EXPECT_EXIT(
      {
        SetLimits(32, 512);
        const absl::Status s = EnsureFileLimit(256);
        rlimit l{};
        getrlimit(RLIMIT_NOFILE, &l);
        std::exit(s.ok() && l.rlim_cur == 512 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(FileLimitTest, RefusesAHardLimitBelowTheMinimum) {
  EXPECT_EXIT(
      {
        SetLimits(64, 64);
        const absl::Status s = EnsureFileLimit(256);
        std::exit(absl::IsResourceExhausted(s) && s.message().find("ulimit -n") != s.message().npos
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace rkv
