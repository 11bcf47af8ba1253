// The deterministic simulation: replay from a seed, interleaving at chunk
// granularity (torn reads), and injected faults.
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/fabric/fabric_test_env.h"

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

}  // namespace
}  // namespace rkv::fabric::testing
