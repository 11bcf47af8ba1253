// A clock a test moves by hand: what a paused client's or server's time
// looks like, and how leases are made to lapse without waiting.
#ifndef RKV_TESTS_CLIENT_REGION_MANUAL_CLOCK_H_
#define RKV_TESTS_CLIENT_REGION_MANUAL_CLOCK_H_

#include <atomic>
#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/client/region/kv_test_env.h"

namespace rkv::testing {

struct ManualClock {
  std::shared_ptr<std::atomic<int64_t>> us = std::make_shared<std::atomic<int64_t>>(0);
  std::function<absl::Time()> fn() const {
    return
        [us = us] { return absl::UnixEpoch() + absl::Hours(1) + absl::Microseconds(us->load()); };
  }
  absl::Time now() const { return fn()(); }
  void Advance(absl::Duration d) { *us += absl::ToInt64Microseconds(d); }
};

// A client of `env` whose clock is `clock`; null (a test failure) when it
// cannot open.
inline std::unique_ptr<client_internal::RegionClient> OpenOn(KvTestEnv& env,
                                                             const ManualClock& clock) {
  client_internal::OpenOptions o = env.client_options();
  o.clock = clock.fn();
  auto c = env.NewClient(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

}  // namespace rkv::testing

#endif  // RKV_TESTS_CLIENT_REGION_MANUAL_CLOCK_H_
