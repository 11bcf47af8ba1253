// The heap census (server/kvserver/heap_reclaim.h): the heap that crashed
// client sessions held comes back to the free pool while the server
// serves, and nothing a live session holds goes with it. The server's
// checks and the clients' clocks are driven by hand.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/kvserver/region_server.h"
#include "tests/client/region/kv_test_env.h"
#include "tests/client/region/manual_clock.h"
#include "tests/common/fabric/verbs_test_setup.h"

namespace rkv::testing {
namespace {

constexpr absl::Duration kLease = absl::Seconds(2);
constexpr int kCrashes = 40;

class HeapReclaimTest : public ::testing::TestWithParam<KvBackend> {
 protected:
  void SetUp() override {
    // A heap of about 750 KiB, and chunks of a 32nd of it: a few dozen
    // crashed writers hold it all unless it comes back.
    auto env = KvTestEnv::Create(GetParam(), {.region_bytes = 1 << 20,
                                              .grace_period = absl::Milliseconds(20),
                                              .client_lease = kLease,
                                              .session_slots = 64,
                                              .lease_thread = false});
    if (!env.ok()) RKV_SKIP_OR_FAIL(env.status());
    env_ = std::move(env).value();
  }

  std::unique_ptr<client_internal::RegionClient> Open(const ManualClock& clock) {
    return OpenOn(*env_, clock);
  }

  std::unique_ptr<KvTestEnv> env_;
};

// Every block in the region's free pool, by walking it (nobody else runs):
// false in *whole if a node fails its checks.
std::vector<uint64_t> PooledBlocks(const uint8_t* memory, const layout::Layout& l, bool* whole) {
  std::vector<uint64_t> blocks;
  *whole = true;
  for (int c = 1; c < 256; ++c) {
    const auto size_class = static_cast<uint8_t>(c);
    uint64_t node;
    std::memcpy(&node, memory + layout::FreePoolHeadOffset(size_class), 8);
    node = layout::FreePoolHead::Decode(node).node;
    for (int n = 0; node != 0 && n < 1 << 20; ++n) {
      const uint64_t bytes = layout::FreeNodeBytes(size_class);
      auto decoded = layout::DecodeFreeNode(
          absl::string_view(reinterpret_cast<const char*>(memory + node), bytes), size_class, l);
      if (!decoded.ok()) {
        *whole = false;
        break;
      }
      blocks.push_back(node);
      blocks.insert(blocks.end(), decoded->blocks.begin(), decoded->blocks.end());
      node = decoded->next;
    }
  }
  return blocks;
}

std::string Value(int i, int version) {
  return absl::StrCat(std::string(900, 'a' + i % 26), version);
}

TEST_P(HeapReclaimTest, CrashedWritersHeapComesBackWhileALiveWriterKeepsAllItHolds) {
  ManualClock clock;  // Everyone's, the server's too.
  auto live = Open(clock);
  ASSERT_NE(live, nullptr);
  constexpr int kLiveKeys = 20;
  std::vector<int> version(kLiveKeys, 0);
  for (int k = 0; k < kLiveKeys; ++k) {
    ASSERT_TRUE(live->Put(absl::StrCat("live", k), Value(k, 0)).ok()) << k;
  }
  // The live writer updates its keys (freeing a block each time, which it
  // holds through the grace period and then reuses) as time passes.
  int next = 0;
  const auto step = [&](absl::Duration d) {
    clock.Advance(d);
    const int k = next++ % kLiveKeys;
    const absl::Status s = live->Put(absl::StrCat("live", k), Value(k, ++version[k]));
    EXPECT_TRUE(s.ok()) << s;
    env_->server->CheckLeases(clock.now());
  };
  std::vector<std::unique_ptr<client_internal::RegionClient>> crashed;
  for (int i = 0; i < kCrashes; ++i) {
    // A writer takes a chunk, writes and rewrites a few keys (holding the
    // blocks it replaced), and is never heard from again: as a process
    // killed (its object stays, unpolled, until the end).
    auto w = Open(clock);
    ASSERT_NE(w, nullptr);
    for (int k = 0; k < 4; ++k) {
      const std::string key = absl::StrCat("crashed", i, "-", k);
      ASSERT_TRUE(w->Put(key, Value(k, 0)).ok()) << i;
      ASSERT_TRUE(w->Put(key, Value(k, 1)).ok()) << i;
    }
    crashed.push_back(std::move(w));
    // A lease and a little more, the server checking every eighth of one:
    // the writer is fenced, and a census round takes its heap back.
    for (int s = 0; s < 12; ++s) {
      // After every fourth crash, short-lived clients come and go, some
      // while a round is under way: what one hands back at close may miss
      // the pool walk, which gives the round up (another follows two
      // leases later) rather than pool it twice.
      if (i % 4 == 0) {
        auto brief = Open(clock);
        ASSERT_NE(brief, nullptr);
        ASSERT_TRUE(brief->Put(absl::StrCat("brief", i, "-", s), Value(s, 0)).ok());
      }
      step(kLease / 8);
    }
    for (int s = 0; s < 20; ++s) step(absl::Milliseconds(5));
  }
  const server::RegionStats st = env_->server->Stats();
  EXPECT_EQ(st.sessions_fenced, uint64_t{kCrashes});
  // Each crashed writer held most of a chunk.
  EXPECT_GT(st.heap_reclaimed, uint64_t{kCrashes} * (env_->server->layout().heap_bytes / 64));
  // Nothing the live writer held was handed to anyone: every value reads
  // back as written (a block given twice would hold another key's value).
  for (int k = 0; k < kLiveKeys; ++k) {
    auto v = live->Get(absl::StrCat("live", k));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, Value(k, version[k])) << k;
  }
  for (int i = 0; i < kCrashes; ++i) {
    for (int k = 0; k < 4; ++k) {
      auto v = live->Get(absl::StrCat("crashed", i, "-", k));
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(*v, Value(k, 1));
    }
  }
  // And the heap serves new writers: what came back is in use.
  auto fresh = Open(clock);
  ASSERT_NE(fresh, nullptr);
  for (int k = 0; k < 100; ++k) {
    ASSERT_TRUE(fresh->Put(absl::StrCat("fresh", k), Value(k, 2)).ok()) << k;
  }
  crashed.clear();  // Fenced: their closes land nothing.
  EXPECT_EQ(*live->Get("crashed3-1"), Value(1, 1));
  // No block is pooled twice, and none a slot names is pooled.
  live.reset();
  fresh.reset();
  const uint8_t* memory = env_->server->MemoryForTesting();
  const layout::Layout& l = env_->server->layout();
  bool whole = false;
  std::vector<uint64_t> pooled = PooledBlocks(memory, l, &whole);
  ASSERT_TRUE(whole);
  std::sort(pooled.begin(), pooled.end());
  EXPECT_EQ(std::adjacent_find(pooled.begin(), pooled.end()), pooled.end())
      << "a block is in the free pool twice";
  layout::ForEachSlot(l, [&](uint64_t offset) {
    uint64_t word;
    std::memcpy(&word, memory + offset, 8);
    if (word == 0) return;
    const uint64_t block = layout::Slot::Decode(layout::CommittedOf(word)).offset;
    EXPECT_FALSE(std::binary_search(pooled.begin(), pooled.end(), block))
        << "a block a slot names is in the free pool";
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, HeapReclaimTest,
                         ::testing::Values(KvBackend::kSoftTcp, KvBackend::kSoftSim,
                                           KvBackend::kVerbs),
                         [](const auto& info) { return KvBackendName(info.param); });

}  // namespace
}  // namespace rkv::testing
