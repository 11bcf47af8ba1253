// Fault injection as a fabric wrapper, over every backend: what each fault
// does to the requests a queue pair posts, and what it leaves alone.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/fabric/fabric_test_env.h"
#include "tests/common/fabric/verbs_test_setup.h"

namespace rkv::fabric::testing {
namespace {

class FaultyFabricTest : public ::testing::TestWithParam<Backend> {};

// An environment whose initiator injects `faults`.
#define RKV_FAULTY_ENV(env, seed, ...)                                                          \
  auto env##_or =                                                                               \
      FabricTestEnv::Create(GetParam(), {.sim_seed = (seed), .initiator_faults = __VA_ARGS__}); \
  if (!env##_or.ok()) RKV_SKIP_OR_FAIL(env##_or.status());                                      \
  std::unique_ptr<FabricTestEnv> env = std::move(env##_or).value()

TEST_P(FaultyFabricTest, InjectedFailuresMayOrMayNotHaveExecuted) {
  // Every FAA fails with "retry exceeded"; whether it reached memory is the
  // caller's problem, as with a lost acknowledgement on hardware.
  int executed = 0, not_executed = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    RKV_FAULTY_ENV(env, seed, {.seed = seed, .fail_probability = 1.0});
    auto qp = env->Connect();
    ASSERT_TRUE(qp.ok()) << qp.status();
    auto* old = reinterpret_cast<uint64_t*>(env->local_mem->data());
    auto got = env->Run(**qp, {env->Faa(1, 0, old, 1)}, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, CompletionStatus::kRetryExceeded);
    EXPECT_TRUE((*qp)->in_error());
    const uint64_t now = *reinterpret_cast<uint64_t*>(env->remote_mem->data());
    (now == 1 ? executed : not_executed)++;
  }
  EXPECT_GT(executed, 0);
  EXPECT_GT(not_executed, 0);
}

TEST_P(FaultyFabricTest, InjectedDropFailsEveryOutstandingRequest) {
  RKV_FAULTY_ENV(env, 5, {.seed = 5, .drop_probability = 1.0});
  auto qp = env->Connect();
  ASSERT_TRUE(qp.ok());
  uint8_t* buf = env->local_mem->data();
  auto got = env->Run(**qp, {env->Read(1, 0, buf, 8), env->Read(2, 0, buf, 8)}, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].status, CompletionStatus::kRetryExceeded);
  EXPECT_EQ(got[1].status, CompletionStatus::kFlushed);
  // Later posts are flushed: the queue pair stays in the error state.
  got = env->Run(**qp, {env->Read(3, 0, buf, 8)}, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kFlushed);
}

TEST_P(FaultyFabricTest, DelaysKeepTheQueuePairsOrderAndItsSignaling) {
  // Every request is held for a while; they still execute in order, and
  // only the signaled ones complete.
  RKV_FAULTY_ENV(env, 9,
                 {.seed = 9, .delay_probability = 1.0, .max_delay = absl::Microseconds(300)});
  auto qp = env->Connect();
  ASSERT_TRUE(qp.ok());
  std::vector<WorkRequest> batch;
  auto* olds = reinterpret_cast<uint64_t*>(env->local_mem->data());
  for (int i = 0; i < 50; ++i) {
    batch.push_back(env->Faa(i, 0, &olds[i], 1));
    if (i % 10 != 9) batch.back().flags = 0;
  }
  auto got = env->Run(**qp, batch, 5);
  ASSERT_EQ(got.size(), 5u);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(got[k].status, CompletionStatus::kSuccess);
    EXPECT_EQ(got[k].wr_id, uint64_t(10 * k + 9));
  }
  for (int i = 0; i < 50; ++i) EXPECT_EQ(olds[i], uint64_t(i));
  EXPECT_TRUE(env->Await(**qp, 1, absl::Milliseconds(5)).empty())
      << "an unsignaled request completed";
  EXPECT_FALSE((*qp)->in_error());
}

TEST_P(FaultyFabricTest, InlineWritesHeldBackSendTheBytesOfTheirPost) {
  // An inline WRITE's buffer may be reused as soon as Post returns, even
  // when the request is held before it is sent.
  RKV_FAULTY_ENV(env, 3,
                 {.seed = 3, .delay_probability = 1.0, .max_delay = absl::Microseconds(300)});
  auto qp = env->Connect();
  ASSERT_TRUE(qp.ok());
  uint8_t* src = env->local_mem->data();
  std::memset(src, 'a', 16);
  WorkRequest w = env->Write(1, 0, src, 16);
  w.flags |= kInline;
  ASSERT_TRUE((*qp)->Post({&w, 1}).ok());
  std::memset(src, 'b', 16);
  auto got = env->Await(**qp, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(env->remote_mem->data()), 16),
            std::string(16, 'a'));
}

TEST_P(FaultyFabricTest, FenceAndPeerIdsPassThroughWrappedFabrics) {
  // Both ends wrapped: the target's listener is the wrapper's, and the
  // initiator's queue pairs name their peer through the wrapper.
  const FaultOptions delays{
      .seed = 4, .delay_probability = 0.5, .max_delay = absl::Microseconds(100)};
  auto env_or = FabricTestEnv::Create(
      GetParam(), {.sim_seed = 4, .initiator_faults = delays, .target_faults = delays});
  if (!env_or.ok()) RKV_SKIP_OR_FAIL(env_or.status());
  std::unique_ptr<FabricTestEnv> env = std::move(env_or).value();
  auto fenced = env->ConnectAs(41);
  auto other = env->ConnectAs(42);
  ASSERT_TRUE(fenced.ok()) << fenced.status();
  ASSERT_TRUE(other.ok()) << other.status();
  uint8_t* buf = env->local_mem->data();
  auto got = env->Run(**fenced, {env->Read(1, 0, buf, 8)}, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);

  ASSERT_TRUE(env->listener->Fence(41).ok());
  got = env->Run(**fenced, {env->Read(2, 0, buf, 8)}, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].status, CompletionStatus::kSuccess);
  EXPECT_TRUE(absl::IsFailedPrecondition(env->ConnectAs(41).status()));
  got = env->Run(**other, {env->Read(3, 0, buf, 8)}, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);
}

std::string ParamName(const ::testing::TestParamInfo<Backend>& info) {
  return BackendName(info.param);
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultyFabricTest,
                         ::testing::Values(Backend::kSoftTcp, Backend::kSoftSim, Backend::kVerbs),
                         ParamName);

}  // namespace
}  // namespace rkv::fabric::testing
