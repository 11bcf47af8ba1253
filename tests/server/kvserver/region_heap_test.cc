// Where a region's heap goes (server/kvserver/heap_census.h), and a
// restart from a region file taking back what clients held when they
// stopped (region_server.h).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/layout/region_format.h"
#include "gtest/gtest.h"
#include "server/kvserver/region_server.h"
#include "tests/client/region/kv_test_env.h"

namespace rkv::testing {
namespace {

constexpr size_t kValueBytes = 1000;

uint64_t BlockBytes(const std::string& key) {
  return layout::ClassBytes(layout::ClassFor(layout::BlockBytes(key.size(), kValueBytes)));
}

std::string Key(int i) { return absl::StrCat("key", 1000 + i); }  // All of one length.

// Regions whose grace period is short, so that freed blocks come back soon.
constexpr absl::Duration kGrace = absl::Milliseconds(20);

TEST(HeapCensusTest, CountsLiveBlocksThePoolAndWhatClientsHold) {
  // A grace period the overwrites below finish well within, however slow
  // the machine: every block they free is still the client's when counted.
  auto env = KvTestEnv::Create(KvBackend::kSoftTcp,
                               {.region_bytes = 8 << 20, .grace_period = absl::Seconds(3)});
  ASSERT_TRUE(env.ok()) << env.status();
  const int kKeys = 100;
  const uint64_t block = BlockBytes(Key(0));
  {
    auto client = (*env)->NewClient();
    ASSERT_TRUE(client.ok()) << client.status();
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_TRUE((*client)->Put(Key(i), std::string(kValueBytes, 'a')).ok());
    }
    server::RegionStats st = (*env)->server->Stats();
    EXPECT_EQ(st.slots_used, uint64_t{kKeys});
    EXPECT_EQ(st.heap_live, kKeys * block);
    EXPECT_EQ(st.heap_pooled, 0u);
    // The rest of the client's chunk is its own.
    EXPECT_GT(st.heap_used, st.heap_live);
    // Overwrites free a block each, which the client keeps for its grace
    // period and reuses.
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_TRUE((*client)->Put(Key(i), std::string(kValueBytes, 'b')).ok());
    }
    st = (*env)->server->Stats();
    EXPECT_EQ(st.heap_live, kKeys * block);
    EXPECT_GE(st.heap_used - st.heap_live - st.heap_pooled, kKeys * block);
  }
  // A client that closes gives back all it held, freed blocks and the rest
  // of its chunk to the last 64 bytes, through the free pool.
  const server::RegionStats st = (*env)->server->Stats();
  EXPECT_EQ(st.slots_used, uint64_t{kKeys});
  EXPECT_EQ(st.heap_live, kKeys * block);
  EXPECT_GE(st.heap_pooled, kKeys * block);
  EXPECT_EQ(st.heap_used - st.heap_live - st.heap_pooled, 0u);
}

// A live client that frees more of a class than it writes (here: deletes)
// hands what it does not reuse back to the free pool once those blocks
// have been reusable for a grace period, without closing. The grace period
// is the region's, whatever the client's options say.
TEST(HeapCensusTest, LiveClientHandsBackBlocksItDoesNotReuse) {
  auto env =
      KvTestEnv::Create(KvBackend::kSoftTcp, {.region_bytes = 8 << 20, .grace_period = kGrace});
  ASSERT_TRUE(env.ok()) << env.status();
  client_internal::OpenOptions options = (*env)->client_options();
  options.grace_period = absl::Seconds(30);
  auto client = (*env)->NewClient(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const int kKeys = 500;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE((*client)->Put(Key(i), std::string(kValueBytes, 'a')).ok());
  }
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE((*client)->Delete(Key(i)).ok());
  const uint64_t freed = kKeys * BlockBytes(Key(0));
  server::RegionStats st = (*env)->server->Stats();
  EXPECT_EQ(st.heap_live, 0u);
  EXPECT_LT(st.heap_pooled, freed);
  // Reads keep the client's event loop turning; the census is the server's.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (st.heap_pooled < freed && absl::Now() < deadline) {
    EXPECT_TRUE(absl::IsNotFound((*client)->Get(Key(0)).status()));
    st = (*env)->server->Stats();
  }
  EXPECT_GE(st.heap_pooled, freed);
  // What the client still holds: the rest of its chunk, no freed block.
  EXPECT_LT(st.heap_used - st.heap_pooled, 256u << 10);
}

class RegionRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.region_bytes = 4 << 20;
    options_.grace_period = kGrace;
    options_.region_file =
        absl::StrCat(::testing::TempDir(), "/rkv-region-heap-", getpid(), ".region");
    std::remove(options_.region_file.c_str());
    auto env = KvTestEnv::Create(KvBackend::kSoftTcp, options_);
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = *std::move(env);
  }
  void TearDown() override {
    env_.reset();
    std::remove(options_.region_file.c_str());
  }

  // The server stops and starts again on its region file.
  void Restart() {
    env_->server.reset();
    auto server = server::RegionServer::Create(*env_->server_fabric, options_);
    ASSERT_TRUE(server.ok()) << server.status();
    env_->server = *std::move(server);
    ASSERT_TRUE(env_->server->recovered());
  }

  server::RegionServerOptions options_;
  std::unique_ptr<KvTestEnv> env_;
};

// Clients that crash strand what they took from the heap cursor; here,
// all of it. Writes then fail for want of heap until the server restarts,
// which rebuilds the free pool from what the index names.
TEST_F(RegionRestartTest, RestartTakesBackHeapThatCrashedClientsHeld) {
  const int kKeys = 200;
  {
    auto client = env_->NewClient();
    ASSERT_TRUE(client.ok()) << client.status();
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_TRUE((*client)->Put(Key(i), std::string(kValueBytes, 'a' + i % 26)).ok());
    }
  }
  const server::RegionStats before = env_->server->Stats();
  // Crashed clients took every byte the cursor had, and the pool's blocks.
  uint8_t* memory = env_->server->MemoryForTesting();
  std::atomic_ref<uint64_t>(
      *reinterpret_cast<uint64_t*>(memory + layout::HeaderOffsets::kHeapCursor))
      .store(env_->server->layout().heap_bytes);
  for (int c = 1; c < 256; ++c) {
    std::atomic_ref<uint64_t>(
        *reinterpret_cast<uint64_t*>(memory + layout::FreePoolHeadOffset(static_cast<uint8_t>(c))))
        .store(0);
  }
  {
    auto client = env_->NewClient();
    ASSERT_TRUE(client.ok()) << client.status();
    const absl::Status s = (*client)->Put("one more", std::string(kValueBytes, 'z'));
    EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  }

  ASSERT_NO_FATAL_FAILURE(Restart());
  const server::RegionStats after = env_->server->Stats();
  EXPECT_EQ(after.slots_used, uint64_t{kKeys});
  EXPECT_EQ(after.heap_live, before.heap_live);
  // Nothing held: the cursor ends at the last live block, and every gap
  // below it is in the pool.
  EXPECT_EQ(after.heap_live + after.heap_pooled, after.heap_used);
  EXPECT_LE(after.heap_used, before.heap_used);

  auto client = env_->NewClient();
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < kKeys; ++i) {
    auto v = (*client)->Get(Key(i));
    ASSERT_TRUE(v.ok()) << Key(i) << ": " << v.status();
    EXPECT_EQ(*v, std::string(kValueBytes, 'a' + i % 26));
  }
  // The heap takes as many new records as it had room for before.
  for (int i = kKeys; i < 2 * kKeys; ++i) {
    const absl::Status s = (*client)->Put(Key(i), std::string(kValueBytes, 'n'));
    ASSERT_TRUE(s.ok()) << Key(i) << ": " << s;
  }
}

}  // namespace
}  // namespace rkv::testing
