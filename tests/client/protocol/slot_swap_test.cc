// SlotSwap against a real region in the simulation: a CAS from the word
// seen replaces it, hands the old block to the allocator for after the
// grace period and updates the cache; from a stale word it changes nothing
// and the cache forgets the key.
#include "client/protocol/slot_swap.h"

#include "gtest/gtest.h"
#include "tests/client/protocol/part_test.h"

namespace rkv::testing {
namespace {

using client_internal::OpRounds;
using client_internal::SlotSwap;

class SlotSwapTest : public PartTest {
 protected:
  void SetUp() override {
    PartTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(client_->Put("k", "v1").ok());
    auto slots = s_->KeySlots("k");
    ASSERT_TRUE(slots.ok());
    for (const auto& [off, word] : *slots) {
      if (word != 0) slot_ = {off, word};
    }
    ASSERT_NE(slot_.second, 0u);
  }

  bool Swap(uint64_t expected, uint64_t desired) {
    std::optional<SlotSwap> swap = SlotSwap::Create(*s_, "k");
    EXPECT_TRUE(swap.has_value());
    OpRounds rounds(*s_);
    swap->Post(rounds, slot_.first, expected, desired);
    EXPECT_TRUE(rounds.posted_cas());
    EXPECT_TRUE(s_->Run(rounds).ok());
    return swap->OnRound(rounds);
  }

  std::pair<uint64_t, uint64_t> slot_;  // The key's committed slot: offset, word.
};

TEST_F(SlotSwapTest, DeleteEmptiesTheSlotAndFreesTheBlockAfterTheGracePeriod) {
  s_->cache().Put("k", s_->region_id(), {slot_.first, slot_.second, s_->Now()});
  ASSERT_TRUE(Swap(slot_.second, 0));
  EXPECT_EQ(s_->ReadWord(slot_.first).value_or(1), 0u);
  EXPECT_EQ(s_->cache().Find("k", s_->region_id()), nullptr);
  EXPECT_GT(s_->heap().AllReusableAt(), s_->Now()) << "the old block waits out the grace period";
  EXPECT_TRUE(absl::IsNotFound(client_->Get("k").status()));
}

TEST_F(SlotSwapTest, UpdateInstallsTheNewWordAndCachesIt) {
  // Another block of the key, written where the client will not allocate.
  std::string block;
  layout::EncodeBlock("k", "v2", &block);
  const uint64_t at = s_->layout().region_bytes - 4096;
  ASSERT_TRUE(s_->WriteBytes(at, block).ok());
  const layout::Slot old = layout::Slot::Decode(slot_.second);
  const uint64_t word = layout::Slot{old.fingerprint, old.size_class, at, false}.Encode();
  ASSERT_TRUE(Swap(slot_.second, word));
  EXPECT_EQ(s_->ReadWord(slot_.first).value_or(0), word);
  const client_internal::CachedSlot* entry = s_->cache().Find("k", s_->region_id());
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->slot_offset, slot_.first);
  EXPECT_EQ(entry->word, word);
  EXPECT_EQ(*client_->Get("k"), "v2");
}

TEST_F(SlotSwapTest, AStaleWordChangesNothing) {
  ASSERT_TRUE(client_->Put("k", "v2").ok());  // The slot now names another block.
  const uint64_t now = s_->ReadWord(slot_.first).value_or(0);
  ASSERT_NE(now, slot_.second);
  s_->cache().Put("k", s_->region_id(), {slot_.first, slot_.second, s_->Now()});
  EXPECT_FALSE(Swap(slot_.second, 0));
  EXPECT_EQ(s_->ReadWord(slot_.first).value_or(0), now);
  EXPECT_EQ(s_->cache().Find("k", s_->region_id()), nullptr);
  EXPECT_EQ(s_->heap().AllReusableAt(), absl::InfinitePast()) << "nothing was freed";
  EXPECT_EQ(*client_->Get("k"), "v2");
}

}  // namespace
}  // namespace rkv::testing
