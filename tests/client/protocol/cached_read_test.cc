// CachedRead against a real region in the simulation: a cache entry that
// still names the key's committed slot answers in one round; one that went
// stale, or whose round took longer than the grace period, is dropped.
#include "client/protocol/cached_read.h"

#include "gtest/gtest.h"
#include "tests/client/protocol/part_test.h"

namespace rkv::testing {
namespace {

using client_internal::CachedRead;
using client_internal::CachedSlot;
using client_internal::OpRounds;

class CachedReadTest : public PartTest {
 protected:
  // What the cache would hold for `key` after reading its slot now.
  CachedSlot SeenNow(absl::string_view key) {
    auto slots = s_->KeySlots(key);
    EXPECT_TRUE(slots.ok());
    for (const auto& [off, word] : *slots) {
      if (layout::IsCommitted(word)) return {off, word, s_->Now(), s_->region_id()};
    }
    ADD_FAILURE() << "no committed slot";
    return {};
  }

  std::optional<std::string> Read(const CachedSlot& cached, absl::Duration delay = {}) {
    CachedRead read(*s_, "k");
    OpRounds rounds(*s_);
    EXPECT_TRUE(read.Post(rounds, cached));
    EXPECT_EQ(rounds.requests().size(), 2u) << "the slot and its block, one doorbell";
    EXPECT_TRUE(s_->Run(rounds).ok());
    s_->Advance(delay);
    return read.OnRound(rounds);
  }
};

TEST_F(CachedReadTest, AFreshEntryAnswersInOneRound) {
  ASSERT_TRUE(client_->Put("k", "v1").ok());
  const CachedSlot cached = SeenNow("k");
  EXPECT_EQ(Read(cached), "v1");
  const CachedSlot* entry = s_->cache().Find("k", s_->region_id());
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->slot_offset, cached.slot_offset);
  EXPECT_EQ(entry->word, cached.word);
}

TEST_F(CachedReadTest, AStaleEntryIsDropped) {
  ASSERT_TRUE(client_->Put("k", "v1").ok());
  const CachedSlot cached = SeenNow("k");
  s_->cache().Put("k", s_->region_id(), cached);
  ASSERT_TRUE(client_->Put("k", "v2").ok());  // A new block: the slot's word changed.
  EXPECT_EQ(Read(cached), std::nullopt);
  EXPECT_EQ(s_->cache().Find("k", s_->region_id()), nullptr);
}

TEST_F(CachedReadTest, ARoundLongerThanTheGracePeriodIsNotTrusted) {
  ASSERT_TRUE(client_->Put("k", "v1").ok());
  EXPECT_EQ(Read(SeenNow("k"), s_->options().grace_period + absl::Milliseconds(1)), std::nullopt);
  EXPECT_EQ(s_->cache().Find("k", s_->region_id()), nullptr);
}

}  // namespace
}  // namespace rkv::testing
