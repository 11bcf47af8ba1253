// What most tests of an operation's parts start from: a region in the
// deterministic simulation, a client that writes it as users do, and a
// part session on it.
#ifndef RKV_TESTS_CLIENT_PROTOCOL_PART_TEST_H_
#define RKV_TESTS_CLIENT_PROTOCOL_PART_TEST_H_

#include <memory>

#include "gtest/gtest.h"
#include "tests/client/protocol/part_test_session.h"

namespace rkv::testing {

class PartTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }

  void Start(const client_internal::BrokenProtocol& broken = {}) {
    auto env = KvTestEnv::Create(KvBackend::kSoftSim, {.region_bytes = 4 << 20});
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = std::move(env).value();
    auto c = env_->NewClient();
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(c).value();
    auto s = PartTestSession::Create(*env_, 1, broken);
    ASSERT_TRUE(s.ok()) << s.status();
    s_ = std::move(s).value();
  }

  std::unique_ptr<KvTestEnv> env_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<PartTestSession> s_;
};

}  // namespace rkv::testing

#endif  // RKV_TESTS_CLIENT_PROTOCOL_PART_TEST_H_
