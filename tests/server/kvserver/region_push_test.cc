// RegionServer::Push, which copies a region to another server's: whole, or
// only the chunks whose hashes differ from the target's, at a ceiling rate
// or not, and never onto a region of another geometry.
#include <atomic>
#include <cstring>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/client/region/kv_test_env.h"

namespace rkv::testing {
namespace {

using server::RegionServer;

constexpr uint64_t kRegionBytes = 4 << 20;

class RegionPushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto env = KvTestEnv::Create(KvBackend::kSoftTcp, {.region_bytes = kRegionBytes}, 1,
                                 /*replicas=*/2);
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = *std::move(env);
  }
  RegionServer& from() { return *env_->server; }
  RegionServer& to() { return *env_->backups.front(); }

  // Fills the pushed span of `s` with bytes drawn from `seed`.
  static void Scribble(RegionServer& s, uint8_t seed) {
    for (const RegionServer::Chunk& c : s.PushChunks()) {
      for (uint32_t i = 0; i < c.length; ++i) {
        s.MemoryForTesting()[c.offset + i] = static_cast<uint8_t>(seed + (c.offset + i) * 7);
      }
    }
  }
  static bool SamePushedBytes(RegionServer& a, RegionServer& b) {
    for (const RegionServer::Chunk& c : a.PushChunks()) {
      if (std::memcmp(a.MemoryForTesting() + c.offset, b.MemoryForTesting() + c.offset, c.length) !=
          0) {
        return false;
      }
    }
    return true;
  }
  absl::StatusOr<uint64_t> Push(RegionServer& target, absl::Span<const uint64_t> hashes,
                                uint64_t bytes_per_second = 0) {
    copied_ = 0;
    return from().Push(target.address(), hashes, {&copied_, &cancel_, bytes_per_second});
  }

  std::unique_ptr<KvTestEnv> env_;
  std::atomic<uint64_t> copied_{0};
  std::atomic<bool> cancel_{false};
};

TEST_F(RegionPushTest, WithoutHashesCopiesEveryChunk) {
  ASSERT_TRUE(to().Fence(7).ok());  // A generation of its own.
  Scribble(from(), 1);
  absl::StatusOr<uint64_t> sent = Push(to(), {});
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(*sent, from().PushBytes());
  EXPECT_EQ(copied_.load(), from().PushBytes());
  EXPECT_TRUE(SamePushedBytes(from(), to()));
  // The header's identity (its generation, with the checksum over it) is
  // each copy's own.
  ASSERT_NE(from().generation(), 7u);
  absl::StatusOr<layout::Layout> header =
      layout::ParseHeader(absl::string_view(reinterpret_cast<const char*>(to().MemoryForTesting()),
                                            layout::kHeaderBytes),
                          kRegionBytes);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->generation, 7u);
}

TEST_F(RegionPushTest, WithTheTargetsHashesSendsOnlyTheChunksThatDiffer) {
  Scribble(from(), 1);
  ASSERT_TRUE(Push(to(), {}).ok());
  // Three chunks change here (one in the heap, one in the index, the last
  // in the header's tail); one byte of each is enough.
  const std::vector<RegionServer::Chunk> chunks = from().PushChunks();
  ASSERT_GT(chunks.size(), 8u);
  const uint64_t changed[] = {chunks[1].offset + 17, chunks[chunks.size() - 2].offset,
                              chunks.back().offset + chunks.back().length - 1};
  for (uint64_t at : changed) from().MemoryForTesting()[at] ^= 0xff;
  ASSERT_FALSE(SamePushedBytes(from(), to()));

  const std::vector<uint64_t> hashes = to().ChunkHashes();
  ASSERT_EQ(hashes.size(), chunks.size());
  absl::StatusOr<uint64_t> sent = Push(to(), hashes);
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(*sent, chunks[1].length + chunks[chunks.size() - 2].length + chunks.back().length);
  EXPECT_EQ(copied_.load(), from().PushBytes()) << "chunks found equal count as copied";
  EXPECT_TRUE(SamePushedBytes(from(), to()));
}

TEST_F(RegionPushTest, HashesOfAnotherRegionShapeAreRefused) {
  std::vector<uint64_t> hashes = to().ChunkHashes();
  hashes.pop_back();
  absl::StatusOr<uint64_t> sent = Push(to(), hashes);
  EXPECT_TRUE(absl::IsInvalidArgument(sent.status())) << sent.status();
}

TEST_F(RegionPushTest, TargetOfAnotherGeometryIsRefused) {
  // Same size, another index share: a byte-for-byte copy would put slots
  // in its heap.
  auto other = RegionServer::Create(*env_->server_fabric,
                                    {.region_bytes = kRegionBytes, .index_share = 0.5});
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<uint64_t> sent = Push(**other, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(sent.status())) << sent.status();
  EXPECT_NE(sent.status().message().find("geometry"), std::string::npos) << sent.status();
}

TEST_F(RegionPushTest, RateCeilingHoldsTheCopyBack) {
  Scribble(from(), 3);
  // 4 MiB at 16 MiB/s: at least a quarter of a second, however fast the
  // fabric (a lower bound only: a slow machine takes longer).
  const absl::Time start = absl::Now();
  absl::StatusOr<uint64_t> sent = Push(to(), {}, 16 << 20);
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(240));
  EXPECT_TRUE(SamePushedBytes(from(), to()));
}

TEST_F(RegionPushTest, CancelledPushStops) {
  cancel_ = true;
  absl::StatusOr<uint64_t> sent = Push(to(), {});
  EXPECT_TRUE(absl::IsCancelled(sent.status())) << sent.status();
}

}  // namespace
}  // namespace rkv::testing
