// TakeOver (server/kvserver/replica_takeover.h) on regions in plain memory: the
// slots it keeps, and the heap it reclaims into the free pool.
#include "server/kvserver/replica_takeover.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/layout/region_format.h"
#include "gtest/gtest.h"
#include "tests/client/region/kv_test_env.h"

namespace rkv::server {
namespace {

constexpr uint64_t kRegionBytes = 1 << 20;

class Region {
 public:
  Region() : words_(kRegionBytes / 8) {
    layout_ = *layout::ComputeLayout(kRegionBytes, 0.25, 7);
    layout::InitRegion(data(), layout_);
  }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words_.data()); }
  const layout::Layout& layout() const { return layout_; }
  uint64_t Word(uint64_t offset) { return words_[offset / 8]; }
  void SetWord(uint64_t offset, uint64_t word) { words_[offset / 8] = word; }

  // Slot `i` of the index names a block of `size_class` at heap offset
  // `heap_at`, which holds `key`.
  void Name(uint64_t i, uint8_t size_class, uint64_t heap_at, const std::string& key) {
    const uint64_t offset = layout_.heap_offset + heap_at;
    layout::EncodeBlockInto(key, "value of " + key, data() + offset);
    SetWord(SlotAt(i),
            layout::Slot{.fingerprint = 1, .size_class = size_class, .offset = offset}.Encode());
  }
  uint64_t SlotAt(uint64_t i) const {
    return layout_.index_offset + (i / layout::kSlotsPerBucket) * layout::kBucketBytes +
           8 * (1 + i % layout::kSlotsPerBucket);
  }

  // The free pool's blocks, by class, each checked as a client popping it
  // would (a node's checksum and offsets); fails on a node that is not.
  std::map<uint8_t, std::vector<uint64_t>> Pool() {
    std::map<uint8_t, std::vector<uint64_t>> pool;
    for (int c = 1; c < 256; ++c) {
      const auto size_class = static_cast<uint8_t>(c);
      uint64_t node =
          layout::FreePoolHead::Decode(Word(layout::FreePoolHeadOffset(size_class))).node;
      while (node != 0) {
        absl::StatusOr<layout::FreeNode> n =
            layout::DecodeFreeNode(absl::string_view(reinterpret_cast<const char*>(data() + node),
                                                     layout::FreeNodeBytes(size_class)),
                                   size_class, layout_);
        EXPECT_TRUE(n.ok()) << n.status();
        if (!n.ok()) break;
        pool[size_class].push_back(node);
        pool[size_class].insert(pool[size_class].end(), n->blocks.begin(), n->blocks.end());
        node = n->next;
      }
    }
    return pool;
  }

 private:
  std::vector<uint64_t> words_;
  layout::Layout layout_;
};

// Every pooled and named block lies below the cursor, none overlapping
// another; together they cover the heap up to the cursor.
void ExpectHeapCoveredOnce(Region& r, const std::map<uint8_t, std::vector<uint64_t>>& pool,
                           const std::vector<std::pair<uint64_t, uint64_t>>& named,
                           uint64_t pooled_bytes) {
  std::vector<std::pair<uint64_t, uint64_t>> blocks = named;
  uint64_t pool_total = 0;
  for (const auto& [c, offsets] : pool) {
    for (uint64_t o : offsets) {
      blocks.emplace_back(o, layout::ClassBytes(c));
      pool_total += layout::ClassBytes(c);
    }
  }
  EXPECT_EQ(pool_total, pooled_bytes);
  std::sort(blocks.begin(), blocks.end());
  uint64_t at = r.layout().heap_offset;
  for (const auto& [offset, bytes] : blocks) {
    EXPECT_EQ(offset, at) << "a gap or an overlap at " << offset;
    at = offset + bytes;
  }
  EXPECT_EQ(at - r.layout().heap_offset, r.Word(layout::HeaderOffsets::kHeapCursor));
}

TEST(ReplicaTakeoverTest, HeapNoSlotNamesGoesToTheFreePoolAndTheCursorBack) {
  Region r;
  const uint64_t c1k = layout::ClassFor(1000);  // The class the slots name most.
  const uint64_t b1k = layout::ClassBytes(c1k);
  // Named: three blocks of ~1 KiB, one of 64 bytes; between them gaps as
  // clients leave them (a reserved chunk's unused end, a freed block).
  r.Name(0, c1k, 0, "a");
  r.Name(1, c1k, 5 * b1k, "b");         // A gap of 4 blocks of the class.
  r.Name(2, 1, 6 * b1k + 3 * 64, "c");  // A gap of 192 bytes.
  r.Name(3, c1k, 64 << 10, "d");        // A gap of most of 64 KiB.
  // Far past it: a cursor clients had moved on, and an old pool.
  r.SetWord(layout::HeaderOffsets::kHeapCursor, 512 << 10);
  r.SetWord(layout::FreePoolHeadOffset(c1k), r.layout().heap_offset + (300 << 10));

  uint8_t* const copies[] = {r.data()};
  absl::StatusOr<TakeoverStats> stats = TakeOver(copies, r.layout());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->slots_changed, 0u);
  EXPECT_EQ(stats->heap_cursor, (64 << 10) + b1k);

  const std::map<uint8_t, std::vector<uint64_t>> pool = r.Pool();
  const uint64_t h = r.layout().heap_offset;
  ExpectHeapCoveredOnce(
      r, pool, {{h, b1k}, {h + 5 * b1k, b1k}, {h + 6 * b1k + 192, 64}, {h + (64 << 10), b1k}},
      stats->pooled_bytes);
  // Each class named gets its share of the free bytes (as of the bytes
  // named: 3 KiB of blocks of ~1 KiB, 64 bytes of the smallest class),
  // within about a block.
  ASSERT_TRUE(pool.contains(1) && pool.contains(c1k));
  const double share_64 = 64.0 / double(3 * b1k + 64);
  EXPECT_NEAR(double(pool.at(1).size() * 64), share_64 * double(stats->pooled_bytes),
              double(2 * b1k));
  EXPECT_NEAR(double(pool.at(c1k).size() * b1k), (1 - share_64) * double(stats->pooled_bytes),
              double(2 * b1k));
  // Named blocks are untouched.
  for (uint64_t i = 0; i < 4; ++i) {
    const layout::Slot s = layout::Slot::Decode(r.Word(r.SlotAt(i)));
    absl::StatusOr<layout::BlockView> b = layout::DecodeBlock(absl::string_view(
        reinterpret_cast<const char*>(r.data() + s.offset), layout::ClassBytes(s.size_class)));
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->value, "value of " + std::string(b->key));
  }
}

TEST(ReplicaTakeoverTest, SlotsThatAreNotWritesNameNothingAndTheirBlocksArePooled) {
  Region r;
  const uint8_t c = layout::ClassFor(200);
  const uint64_t bytes = layout::ClassBytes(c);
  const uint64_t h = r.layout().heap_offset;
  r.Name(0, c, 0, "kept");
  r.Name(1, c, bytes, "claim");  // An undecided claim: never a write.
  r.SetWord(r.SlotAt(1), r.Word(r.SlotAt(1)) | layout::kPendingBit);
  r.Name(2, c, 2 * bytes, "intent");  // An intent takes effect.
  r.SetWord(r.SlotAt(2), layout::IntentOf(r.Word(r.SlotAt(2))));
  r.Name(3, c, 3 * bytes, "deleted");  // A tombstone empties its slot.
  r.SetWord(r.SlotAt(3), layout::DeleteIntentOf(r.Word(r.SlotAt(3))));
  r.Name(4, c, 4 * bytes, "last");

  uint8_t* const copies[] = {r.data()};
  absl::StatusOr<TakeoverStats> stats = TakeOver(copies, r.layout());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(r.Word(r.SlotAt(1)), 0u);
  EXPECT_TRUE(layout::IsCommitted(r.Word(r.SlotAt(2))));
  EXPECT_EQ(r.Word(r.SlotAt(3)), 0u);
  EXPECT_EQ(stats->pooled_bytes, 2 * bytes);
  ExpectHeapCoveredOnce(r, r.Pool(), {{h, bytes}, {h + 2 * bytes, bytes}, {h + 4 * bytes, bytes}},
                        stats->pooled_bytes);
}

TEST(ReplicaTakeoverTest, EveryCopyGetsThePrimarysSlotsBlocksAndPool) {
  Region primary, backup;
  const uint8_t c = layout::ClassFor(500);
  const uint64_t bytes = layout::ClassBytes(c);
  primary.Name(0, c, 0, "x");
  primary.Name(1, c, 7 * bytes, "y");
  backup.Name(1, c, 3 * bytes, "stale");  // The backup missed y's write.
  uint8_t* const copies[] = {primary.data(), backup.data()};
  absl::StatusOr<TakeoverStats> stats = TakeOver(copies, primary.layout());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(backup.Word(backup.SlotAt(1)), primary.Word(primary.SlotAt(1)));
  const layout::Slot y = layout::Slot::Decode(primary.Word(primary.SlotAt(1)));
  EXPECT_EQ(std::memcmp(backup.data() + y.offset, primary.data() + y.offset, bytes), 0);
  EXPECT_EQ(backup.Pool(), primary.Pool());
  EXPECT_EQ(backup.Word(layout::HeaderOffsets::kHeapCursor), 8 * bytes);
}

TEST(ReplicaTakeoverTest, BlankRegionHasNoPoolAndCursorAtTheStart) {
  Region r;
  r.SetWord(layout::HeaderOffsets::kHeapCursor, 100 << 10);
  uint8_t* const copies[] = {r.data()};
  absl::StatusOr<TakeoverStats> stats = TakeOver(copies, r.layout());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->heap_cursor, 0u);
  EXPECT_EQ(stats->pooled_bytes, 0u);
  EXPECT_TRUE(r.Pool().empty());
}

// What a reconfiguration does to a region, over and over: clients reserve
// heap and are then fenced off before they can hand back what they did not
// use. Without the reclaim each round strands a chunk per client.
TEST(ReplicaTakeoverTest, ReconfigurationsStrandNoHeap) {
  // A short grace period: closing is quick.
  auto env = testing::KvTestEnv::Create(
      testing::KvBackend::kSoftTcp,
      {.region_bytes = kRegionBytes, .grace_period = absl::Milliseconds(1)});
  ASSERT_TRUE(env.ok()) << env.status();
  RegionServer& server = *(*env)->server;
  const uint64_t heap_bytes = server.layout().heap_bytes;
  client_internal::OpenOptions options = (*env)->client_options();
  const std::string value(1000, 'v');
  // Each round writes 8 blocks and frees the 8 of the round before: rounds
  // enough to take the heap three times over.
  const uint64_t block_bytes = layout::ClassBytes(layout::ClassFor(layout::BlockBytes(4, 1003)));
  const int rounds = static_cast<int>(3 * heap_bytes / (8 * block_bytes));
  for (int round = 0; round < rounds; ++round) {
    absl::StatusOr<std::unique_ptr<Client>> client = (*env)->NewClient(options);
    ASSERT_TRUE(client.ok()) << client.status();
    for (int k = 0; k < 8; ++k) {
      const absl::Status put = (*client)->Put(absl::StrCat("key", k), absl::StrCat(round, value));
      ASSERT_TRUE(put.ok()) << "round " << round << ": " << put;
    }
    ASSERT_TRUE(server.Fence(1000 + round).ok());
    ASSERT_TRUE(server.Settle(/*wipe=*/false).ok());
    // The client closes now; its hand-back meets the fence.
  }
  absl::StatusOr<std::unique_ptr<Client>> reader = (*env)->NewClient(options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (int k = 0; k < 8; ++k) {
    absl::StatusOr<std::string> v = (*reader)->Get(absl::StrCat("key", k));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, absl::StrCat(rounds - 1, value));
  }
}

}  // namespace
}  // namespace rkv::server
