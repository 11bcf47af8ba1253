// The slot cache: found only for the region of the slot, replaced by a
// later Put, forgotten by Erase, and bounded: a full set gives up its
// oldest entry.
#include "client/session/slot_cache.h"

#include <string>

#include "gtest/gtest.h"

namespace rkv::client_internal {
namespace {

CachedSlot Slot(uint64_t word) { return {64 * word, word, absl::UnixEpoch(), 0}; }

TEST(SlotCacheTest, FindsWhatWasPutForItsRegionOnly) {
  SlotCache cache(16);
  EXPECT_EQ(cache.Find("k", 1), nullptr);
  cache.Put("k", 1, Slot(7));
  const CachedSlot* e = cache.Find("k", 1);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->word, 7u);
  EXPECT_EQ(e->slot_offset, 64u * 7);
  EXPECT_EQ(cache.Find("k", 2), nullptr);  // Another region's slot says nothing.
  EXPECT_EQ(cache.Find("k2", 1), nullptr);
  cache.Put("k", 2, Slot(9));  // The key moved: one entry, now region 2's.
  EXPECT_EQ(cache.Find("k", 1), nullptr);
  EXPECT_EQ(cache.Find("k", 2)->word, 9u);
  EXPECT_EQ(cache.size(), 1u);
  cache.Erase("k");
  EXPECT_EQ(cache.Find("k", 2), nullptr);
  EXPECT_EQ(cache.size(), 0u);
  cache.Erase("k");  // Absent: nothing happens.
}

TEST(SlotCacheTest, BoundedWithTheOldestGoingFirst) {
  constexpr int kCapacity = 64;
  SlotCache cache(kCapacity);
  for (int i = 1; i <= 10 * kCapacity; ++i) {
    cache.Put("k" + std::to_string(i), 1, Slot(i));
    ASSERT_LE(cache.size(), size_t{kCapacity});
  }
  // The newest entries are all there: each replaced the oldest of its sets.
  for (int i = 10 * kCapacity - SlotCache::kWays + 1; i <= 10 * kCapacity; ++i) {
    const CachedSlot* e = cache.Find("k" + std::to_string(i), 1);
    ASSERT_NE(e, nullptr) << i;
    EXPECT_EQ(e->word, uint64_t(i));
  }
  EXPECT_EQ(cache.Find("k1", 1), nullptr);
}

TEST(SlotCacheTest, ZeroCapacityCachesNothing) {
  SlotCache cache(0);
  cache.Put("k", 1, Slot(7));
  EXPECT_EQ(cache.Find("k", 1), nullptr);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace rkv::client_internal
