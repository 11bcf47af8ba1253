// The deterministic simulation: replay from a seed, interleaving at chunk
// granularity (torn reads), and injected faults.
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fabric/fabric_test_env.h"

namespace rkv::fabric::testing {
namespace {

constexpr uint32_t kBlock = 4096;

// One QP READs a 4 KiB block while another overwrites it with 0xFF.
// Returns what the READ saw.
std::string RaceReadAgainstWrite(uint64_t seed) {
  auto env = FabricTestEnv::Create(Backend::kSoftSim, {.sim_seed = seed});
  EXPECT_TRUE(env.ok()) << env.status();
  auto reader = (*env)->Connect();
  auto writer = (*env)->Connect();
  uint8_t* seen = (*env)->local_mem->data();
  uint8_t* ones = seen + kBlock;
  std::memset(ones, 0xFF, kBlock);
  EXPECT_TRUE((*writer)->Post({(*env)->Write(1, 0, ones, kBlock)}).ok());
  EXPECT_TRUE((*reader)->Post({(*env)->Read(2, 0, seen, kBlock)}).ok());
  EXPECT_EQ((*env)->Await(**reader, 1).size(), 1u);
  EXPECT_EQ((*env)->Await(**writer, 1).size(), 1u);
  return std::string(reinterpret_cast<char*>(seen), kBlock);
}

bool Torn(const std::string& block) {
  const bool any_old = block.find('\x00') != std::string::npos;
  const bool any_new = block.find('\xFF') != std::string::npos;
  return any_old && any_new;
}

// The KV layer detects torn blocks by checksum; this proves the fabric can
// produce them, so that detection is exercised.
TEST(SimNetworkTest, ReadsCanBeTornByWritesOfOtherQueuePairs) {
  int torn = 0, clean = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::string block = RaceReadAgainstWrite(seed);
    if (Torn(block)) {
      torn++;
      // Torn only at chunk boundaries: each 64-byte chunk is all old or all new.
      for (uint32_t c = 0; c < kBlock; c += 64) {
        EXPECT_TRUE(std::all_of(block.begin() + c, block.begin() + c + 64,
                                [&](char b) { return b == block[c]; }));
      }
    } else {
      clean++;
    }
  }
  EXPECT_GT(torn, 0) << "no seed produced a torn read";
  EXPECT_GT(clean, 0) << "every seed produced a torn read";
}

TEST(SimNetworkTest, SameSeedReplaysTheSameInterleaving) {
  for (uint64_t seed : {3, 17, 4242}) {
    EXPECT_EQ(RaceReadAgainstWrite(seed), RaceReadAgainstWrite(seed)) << "seed " << seed;
  }
  std::set<std::string> outcomes;
  for (uint64_t seed = 1; seed <= 20; ++seed) outcomes.insert(RaceReadAgainstWrite(seed));
  EXPECT_GT(outcomes.size(), 2u) << "seeds should explore different interleavings";
}

TEST(SimNetworkTest, InjectedFailuresMayOrMayNotHaveExecuted) {
  // Every FAA fails with "retry exceeded"; whether it reached memory is the
  // caller's problem, as with a lost acknowledgement on hardware.
  int executed = 0, not_executed = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    auto env = FabricTestEnv::Create(
        Backend::kSoftSim, {.sim_seed = seed, .initiator_faults = {.seed = seed,
                                                                    .fail_probability = 1.0}});
    ASSERT_TRUE(env.ok()) << env.status();
    auto qp = (*env)->Connect();
    ASSERT_TRUE(qp.ok());
    auto* old = reinterpret_cast<uint64_t*>((*env)->local_mem->data());
    auto got = (*env)->Run(**qp, {(*env)->Faa(1, 0, old, 1)}, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, CompletionStatus::kRetryExceeded);
    EXPECT_TRUE((*qp)->in_error());
    const uint64_t word = *reinterpret_cast<uint64_t*>((*env)->remote_mem->data());
    (word == 1 ? executed : not_executed)++;
  }
  EXPECT_GT(executed, 0);
  EXPECT_GT(not_executed, 0);
}

TEST(SimNetworkTest, InjectedDropFailsEveryOutstandingRequest) {
  auto env = FabricTestEnv::Create(
      Backend::kSoftSim, {.initiator_faults = {.seed = 5, .drop_probability = 1.0}});
  ASSERT_TRUE(env.ok());
  auto qp = (*env)->Connect();
  ASSERT_TRUE(qp.ok());
  uint8_t* buf = (*env)->local_mem->data();
  auto got = (*env)->Run(**qp, {(*env)->Read(1, 0, buf, 8), (*env)->Read(2, 0, buf, 8)}, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].status, CompletionStatus::kRetryExceeded);
  EXPECT_EQ(got[1].status, CompletionStatus::kFlushed);
}

TEST(SimNetworkTest, DelaysReorderAcrossQueuePairsButNotWithinOne) {
  auto env = FabricTestEnv::Create(
      Backend::kSoftSim,
      {.sim_seed = 9,
       .initiator_faults = {.seed = 9, .delay_probability = 0.5, .max_delay = absl::Microseconds(50)}});
  ASSERT_TRUE(env.ok());
  auto qp = (*env)->Connect();
  ASSERT_TRUE(qp.ok());
  std::vector<WorkRequest> batch;
  auto* olds = reinterpret_cast<uint64_t*>((*env)->local_mem->data());
  for (int i = 0; i < 50; ++i) batch.push_back((*env)->Faa(i, 0, &olds[i], 1));
  auto got = (*env)->Run(**qp, batch, 50);
  ASSERT_EQ(got.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(olds[i], uint64_t(i));  // Still in order.
  EXPECT_GT((*env)->sim->steps(), 50u);  // Delays cost steps.
}

}  // namespace
}  // namespace rkv::fabric::testing
