// Every encoding of the region format: round trips, boundaries, and
// corruption that must always be detected.
#include "common/layout/region_format.h"

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "common/hash.h"
#include "gtest/gtest.h"

namespace rkv::layout {
namespace {

TEST(SlotTest, RoundTripsEveryState) {
  for (uint64_t offset : {uint64_t{64}, uint64_t{4096}, (uint64_t{1} << 48) - 64}) {
    for (bool pending : {false, true}) {
      Slot s{0xAB, 200, offset, pending};
      const uint64_t word = s.Encode();
      Slot back = Slot::Decode(word);
      EXPECT_EQ(back.fingerprint, 0xAB);
      EXPECT_EQ(back.size_class, 200);
      EXPECT_EQ(back.offset, offset);
      EXPECT_EQ(back.pending, pending);
      EXPECT_EQ(IsCommitted(word), !pending);
      // A killed claim still names the same block, and is neither
      // committed nor a claim anyone may commit.
      const uint64_t killed = KilledOf(word);
      EXPECT_TRUE(IsKilled(killed));
      EXPECT_FALSE(IsCommitted(killed));
      EXPECT_EQ(CommittedOf(killed), CommittedOf(word));
      EXPECT_EQ(Slot::Decode(killed).offset, offset);
      // Intents (replicated regions) name the block too, are neither
      // committed, pending nor killed, and say what the slot becomes.
      const uint64_t committed = CommittedOf(word);
      for (const uint64_t intent : {IntentOf(committed), DeleteIntentOf(committed)}) {
        EXPECT_TRUE(IsIntent(intent));
        EXPECT_FALSE(IsCommitted(intent));
        EXPECT_FALSE(IsKilled(intent));
        EXPECT_FALSE(Slot::Decode(intent).pending);
        EXPECT_EQ(CommittedOf(intent), committed);
        EXPECT_EQ(Slot::Decode(intent).offset, offset);
      }
      EXPECT_EQ(IntentTarget(IntentOf(committed)), committed);
      EXPECT_EQ(IntentTarget(DeleteIntentOf(committed)), 0u);
      EXPECT_FALSE(IsIntent(word));
      EXPECT_FALSE(IsIntent(killed));
    }
  }
  EXPECT_FALSE(IsCommitted(0));
  EXPECT_FALSE(IsIntent(0));
}

TEST(SizeClassTest, ClassesGrowAndCoverTheLargestBlock) {
  uint64_t prev = 0;
  for (int c = 1; c < 256; ++c) {
    const uint64_t bytes = ClassBytes(static_cast<uint8_t>(c));
    EXPECT_GT(bytes, prev) << c;
    EXPECT_EQ(bytes % kBlockAlign, 0u) << c;
    prev = bytes;
  }
  EXPECT_EQ(ClassBytes(1), 64u);
  EXPECT_EQ(ClassBytes(64), 4096u);
  for (uint64_t n : {uint64_t{1}, uint64_t{64}, uint64_t{65}, uint64_t{4096}, uint64_t{4097},
                     BlockBytes(kMaxKeyBytes, kMaxValueBytes)}) {
    const uint8_t c = ClassFor(n);
    ASSERT_NE(c, 0) << n;
    EXPECT_GE(ClassBytes(c), n);
    if (c > 1) {
      EXPECT_LT(ClassBytes(c - 1), n) << "not the smallest class for " << n;
    }
  }
  // Geometric classes waste at most about 9 %.
  const uint64_t big = BlockBytes(kMaxKeyBytes, kMaxValueBytes);
  EXPECT_LT(ClassBytes(ClassFor(big)), big * 110 / 100);
}

TEST(BlockTest, RoundTripsAtBoundarySizes) {
  for (size_t klen : {size_t{1}, size_t{48}, kMaxKeyBytes}) {
    for (size_t vlen :
         {size_t{0}, size_t{1}, size_t{47}, size_t{48}, size_t{4080}, kMaxValueBytes}) {
      std::string key(klen, 'k'), value(vlen, '\0');
      for (size_t i = 0; i < vlen; ++i) value[i] = static_cast<char>(i * 13);
      std::string block;
      EncodeBlock(key, value, &block);
      EXPECT_EQ(block.size() % kBlockAlign, 0u);
      auto view = DecodeBlock(block);
      ASSERT_TRUE(view.ok()) << klen << "/" << vlen << ": " << view.status();
      EXPECT_EQ(view->key, key);
      EXPECT_EQ(view->value, value);
    }
  }
}

TEST(BlockTest, EveryCorruptedByteIsDetected) {
  std::string block;
  EncodeBlock("some-key", std::string(150, 'v'), &block);
  const size_t covered = BlockBytes(8, 150);
  for (size_t i = 0; i < covered; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = block;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      EXPECT_FALSE(DecodeBlock(bad).ok()) << "byte " << i << " bit " << bit;
    }
  }
}

// The test hook's decoding: the checksum is not looked at, the lengths are.
TEST(BlockTest, LengthsOnlySkipsTheChecksumAlone) {
  std::string block;
  EncodeBlock("some-key", std::string(150, 'v'), &block);
  std::string value_flipped = block;
  value_flipped[kBlockHeaderBytes + 8 + 3] ^= 1;
  EXPECT_FALSE(DecodeBlock(value_flipped).ok());
  auto lax = DecodeBlock(value_flipped, BlockCheck::kLengthsOnly);
  ASSERT_TRUE(lax.ok()) << lax.status();
  EXPECT_EQ(lax->key, "some-key");
  std::string too_long = block;
  too_long[8] = static_cast<char>(0xFF);  // Value length past the block.
  too_long[9] = static_cast<char>(0xFF);
  EXPECT_FALSE(DecodeBlock(too_long, BlockCheck::kLengthsOnly).ok());
}

TEST(BlockTest, TornBlocksAreDetected) {
  // Two versions of one key, torn at every 8-byte boundary (the fabric
  // never tears an aligned word).
  std::string a, b;
  EncodeBlock("key", std::string(500, 'a'), &a);
  EncodeBlock("key", std::string(500, 'b'), &b);
  ASSERT_EQ(a.size(), b.size());
  for (size_t cut = 8; cut < BlockBytes(3, 500); cut += 8) {
    std::string torn = a.substr(0, cut) + b.substr(cut);
    EXPECT_FALSE(DecodeBlock(torn).ok()) << "cut at " << cut;
    torn = b.substr(0, cut) + a.substr(cut);
    EXPECT_FALSE(DecodeBlock(torn).ok()) << "cut at " << cut;
  }
  EXPECT_FALSE(DecodeBlock(std::string(64, '\0')).ok());  // Never written.
  EXPECT_FALSE(DecodeBlock("short").ok());
}

TEST(HeaderTest, RoundTripsAndRefusesWhatIsNotARegion) {
  auto l = ComputeLayout(8 << 20, 0.25, 7);
  ASSERT_TRUE(l.ok());
  std::vector<uint8_t> region(8 << 20);
  InitRegion(region.data(), *l);
  auto header = [&] {
    return absl::string_view(reinterpret_cast<char*>(region.data()), kHeaderBytes);
  };
  auto back = ParseHeader(header(), region.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->groups, l->groups);
  EXPECT_EQ(back->heap_offset, l->heap_offset);
  EXPECT_EQ(back->generation, 7u);
  EXPECT_GE(back->heap_offset, back->index_offset + back->groups * kGroupBytes);

  SetGeneration(region.data(), 8);
  EXPECT_EQ(ParseHeader(header(), region.size())->generation, 8u);

  // The grace period: unset in a fresh header, read where the header read
  // reaches it, outside the checksum (a server sets it at every start).
  EXPECT_EQ(back->grace_us, 0u);
  SetGracePeriod(region.data(), 200000);
  EXPECT_EQ(ParseHeader(header(), region.size())->grace_us, 200000u);
  EXPECT_EQ(ParseHeader(header().substr(0, HeaderOffsets::kChecksum + 4), region.size())->grace_us,
            0u);

  // The session table and the client lease: none until a server says so.
  EXPECT_EQ(ParseHeader(header(), region.size())->session_slots, 0u);
  SetSessionTable(region.data(), 0x7f0000001000, 77, 4096, 5000000);
  back = ParseHeader(header(), region.size());
  EXPECT_EQ(back->session_table, 0x7f0000001000u);
  EXPECT_EQ(back->session_rkey, 77u);
  EXPECT_EQ(back->session_slots, 4096u);
  EXPECT_EQ(back->lease_us, 5000000u);
  EXPECT_EQ(
      ParseHeader(header().substr(0, HeaderOffsets::kSessionTable), region.size())->session_slots,
      0u);

  // A region of format 1 (before sessions) is still read, and a server
  // stamps it with this build's format, which builds before sessions refuse.
  auto stamp_version = [&](uint32_t v) {  // As a build of format v wrote it.
    std::memcpy(region.data() + HeaderOffsets::kVersion, &v, 4);
    const uint32_t crc =
        Crc32c(absl::string_view(reinterpret_cast<char*>(region.data()), HeaderOffsets::kChecksum));
    std::memcpy(region.data() + HeaderOffsets::kChecksum, &crc, 4);
  };
  stamp_version(1);
  EXPECT_TRUE(ParseHeader(header(), region.size()).ok());
  SetGeneration(region.data(), 10);
  uint32_t version = 0;
  std::memcpy(&version, region.data() + HeaderOffsets::kVersion, 4);
  EXPECT_EQ(version, kFormatVersion);
  stamp_version(kFormatVersion + 1);
  absl::StatusOr<Layout> newer = ParseHeader(header(), region.size());
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("this build reads 1 to 2"), std::string::npos)
      << newer.status();
  SetGeneration(region.data(), 11);
  ASSERT_TRUE(ParseHeader(header(), region.size()).ok());

  EXPECT_FALSE(ParseHeader(header(), region.size() * 2).ok());  // Another size.
  for (size_t byte : {size_t{0}, size_t{8}, size_t{40}, size_t{64}}) {
    std::vector<uint8_t> copy = region;
    copy[byte] ^= 0x10;
    EXPECT_FALSE(ParseHeader(absl::string_view(reinterpret_cast<char*>(copy.data()), kHeaderBytes),
                             copy.size())
                     .ok())
        << byte;
  }
  EXPECT_FALSE(ParseHeader("short", 100).ok());
}

// Every slot once, none on a bucket header, a third in overflow buckets;
// and a key's combined buckets are made of exactly these slots.
TEST(IndexTest, SlotsAreWhereBucketsSayTheyAre) {
  auto l = ComputeLayout(8 << 20, 0.25, 7);
  ASSERT_TRUE(l.ok());
  std::set<uint64_t> slots;
  uint64_t overflow = 0;
  ForEachSlot(*l, [&](uint64_t off) {
    EXPECT_GE(off, l->index_offset);
    EXPECT_LT(off, l->index_offset + l->groups * kGroupBytes);
    EXPECT_NE((off - l->index_offset) % kBucketBytes, 0u) << "a bucket header";
    EXPECT_EQ(off % 8, 0u);
    slots.insert(off);
    overflow += IsOverflowSlot(*l, off);
  });
  EXPECT_EQ(slots.size(), l->slots());
  EXPECT_EQ(overflow * 3, l->slots());
  for (uint64_t g : {uint64_t{0}, l->groups / 2, l->groups - 1}) {
    for (uint32_t side : {0u, 1u}) {
      const uint64_t bucket = CombinedBucketOffset(*l, g, side);
      int in_overflow = 0;
      for (uint32_t i = 0; i < kSlotsPerCombinedBucket; ++i) {
        EXPECT_TRUE(slots.contains(SlotOffset(bucket, i)));
        in_overflow += IsOverflowSlot(*l, SlotOffset(bucket, i));
      }
      EXPECT_EQ(in_overflow, static_cast<int>(kSlotsPerBucket));  // The shared half.
    }
  }
}

// A combined bucket's slots lie within its 128 bytes, past the header of
// each of its two buckets; the slots it holds are exactly its 14, and a
// shared overflow slot belongs to both combined buckets of its group.
TEST(IndexTest, CombinedBucketsHoldTheirSlots) {
  auto l = ComputeLayout(8 << 20, 0.25, 7);
  ASSERT_TRUE(l.ok());
  std::set<uint64_t> within;
  for (uint32_t i = 0; i < kSlotsPerCombinedBucket; ++i) {
    const uint64_t at = SlotOffsetInCombinedBucket(i);
    EXPECT_LT(at, kCombinedBucketBytes);
    EXPECT_NE(at % kBucketBytes, 0u) << "a bucket header";
    within.insert(at);
  }
  EXPECT_EQ(within.size(), kSlotsPerCombinedBucket);
  const uint64_t g = l->groups / 2;
  const uint64_t left = CombinedBucketOffset(*l, g, 0), right = CombinedBucketOffset(*l, g, 1);
  for (uint32_t side : {0u, 1u}) {
    const uint64_t bucket = CombinedBucketOffset(*l, g, side);
    int held = 0;
    ForEachSlot(*l, [&](uint64_t off) { held += InCombinedBucket(bucket, off); });
    EXPECT_EQ(held, static_cast<int>(kSlotsPerCombinedBucket));
    for (uint32_t i = 0; i < kSlotsPerCombinedBucket; ++i) {
      const uint64_t off = SlotOffset(bucket, i);
      EXPECT_EQ(off, bucket + SlotOffsetInCombinedBucket(i));
      EXPECT_TRUE(InCombinedBucket(bucket, off));
      EXPECT_EQ(InCombinedBucket(left, off) && InCombinedBucket(right, off),
                IsOverflowSlot(*l, off));
    }
  }
  EXPECT_FALSE(InCombinedBucket(left, left + kCombinedBucketBytes));
  EXPECT_FALSE(InCombinedBucket(right, left));
}

TEST(HeaderTest, LayoutArgumentsAreChecked) {
  EXPECT_FALSE(ComputeLayout(1 << 20, 0.0, 1).ok());
  EXPECT_FALSE(ComputeLayout(1 << 20, 1.0, 1).ok());
  EXPECT_FALSE(ComputeLayout(1000, 0.25, 1).ok());
  EXPECT_FALSE(ComputeLayout(1 << 20, 0.9999, 1).ok());  // No heap left.
  auto l = ComputeLayout(64 << 20, 0.25, 1);
  ASSERT_TRUE(l.ok());
  EXPECT_NEAR(static_cast<double>(l->groups * kGroupBytes) / (64 << 20), 0.25, 0.01);
}

TEST(FreePoolTest, HeadsRoundTripWithTheirTag) {
  const FreePoolHead h{0xBEEF, (uint64_t{1} << 47) + 4096};
  const FreePoolHead d = FreePoolHead::Decode(h.Encode());
  EXPECT_EQ(d.tag, h.tag);
  EXPECT_EQ(d.node, h.node);
  EXPECT_EQ(FreePoolHead::Decode(0).node, 0u);
  // Every class's head lies in the header, past its checksummed part.
  EXPECT_GE(FreePoolHeadOffset(0), HeaderOffsets::kHeapCursor + 8);
  EXPECT_LE(FreePoolHeadOffset(255) + 8, kHeaderBytes);
}

TEST(FreePoolTest, NodesRoundTripAndRefuseCorruptionAndStrayOffsets) {
  auto l = ComputeLayout(8 << 20, 0.25, 1);
  ASSERT_TRUE(l.ok());
  for (uint8_t c : {uint8_t{1}, uint8_t{16}, uint8_t{83}, uint8_t{120}}) {
    SCOPED_TRACE(static_cast<int>(c));
    FreeNode node;
    node.next = l->heap_offset + 64 * 3;
    for (uint64_t i = 0; i < FreeNodeCapacity(c); ++i)
      node.blocks.push_back(l->heap_offset + 64 * i);
    std::string buf(FreeNodeBytes(c), '\0');
    auto* out = reinterpret_cast<uint8_t*>(buf.data());
    EncodeFreeNode(node, c, out);
    auto back = DecodeFreeNode(buf, c, *l);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->next, node.next);
    EXPECT_EQ(back->blocks, node.blocks);
    // Any flipped byte of the covered part is caught.
    for (size_t at = 0; at < 16 + 8 * node.blocks.size(); at += 7) {
      std::string bad = buf;
      bad[at] ^= 0x10;
      EXPECT_FALSE(DecodeFreeNode(bad, c, *l).ok()) << at;
    }
    // Offsets outside the heap or off the block grid are refused even under
    // a valid checksum: a node read after someone reused it may hold anything.
    for (uint64_t stray : {uint64_t{64}, l->heap_offset + 1, l->region_bytes}) {
      FreeNode bad = node;
      bad.blocks[0] = stray;
      EncodeFreeNode(bad, c, out);
      EXPECT_FALSE(DecodeFreeNode(buf, c, *l).ok()) << stray;
    }
  }
  EXPECT_FALSE(DecodeFreeNode("short", 1, *l).ok());
}

TEST(PlacementTest, TwoDistinctCandidatesAndStableHashes) {
  for (int i = 0; i < 1000; ++i) {
    const std::string key = "key" + std::to_string(i);
    KeyPlacement p = PlaceKey(key, 17);
    EXPECT_LT(p.group[0], 17u);
    EXPECT_LT(p.group[1], 17u);
    EXPECT_FALSE(p.group[0] == p.group[1] && p.side[0] == p.side[1]);
    KeyPlacement q = PlaceKey(key, 17);
    EXPECT_EQ(p.group[0], q.group[0]);
    EXPECT_EQ(p.fingerprint, q.fingerprint);
  }
}

}  // namespace
}  // namespace rkv::layout
