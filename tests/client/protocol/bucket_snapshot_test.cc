// BucketSnapshot against a real region in the simulation: it finds the
// key's committed slot and trusts nothing else (pending claims, other
// fingerprints, blocks of another key); it reads each candidate block once
// and remembers it for half a grace period; a late or torn block read
// makes the snapshot untrustworthy.
#include "client/protocol/bucket_snapshot.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/client/protocol/part_test.h"

namespace rkv::testing {
namespace {

using client_internal::BucketSnapshot;
using client_internal::OpRounds;

class BucketSnapshotTest : public PartTest {
 protected:
  void SetUp() override { Reset({}); }

  void Reset(const client_internal::BrokenProtocol& broken) {
    Start(broken);
    if (HasFatalFailure()) return;
    // Planted blocks go at the heap's end, far from the client's chunks.
    next_block_ = s_->layout().region_bytes;
  }

  // Writes a block of `key` and `value` into the heap; returns the
  // committed slot word naming it, under `fingerprint`.
  uint64_t PlantBlock(absl::string_view key, absl::string_view value, uint8_t fingerprint) {
    std::string block;
    layout::EncodeBlock(key, value, &block);
    next_block_ -= 4096;
    EXPECT_TRUE(s_->WriteBytes(next_block_, block).ok());
    const uint8_t c = layout::ClassFor(layout::BlockBytes(key.size(), value.size()));
    return layout::Slot{fingerprint, c, next_block_, false}.Encode();
  }
  // Puts `word` into a free slot of `key`'s buckets; returns the slot.
  uint64_t PlantSlot(absl::string_view key, uint64_t word) {
    auto slots = s_->KeySlots(key);
    EXPECT_TRUE(slots.ok());
    for (const auto& [off, w] : *slots) {
      if (w != 0) continue;
      EXPECT_TRUE(s_->WriteWord(off, word).ok());
      return off;
    }
    ADD_FAILURE() << "no free slot";
    return 0;
  }
  // The one occupied slot of `key`'s buckets (after a single write).
  std::pair<uint64_t, uint64_t> OnlySlot(absl::string_view key) {
    auto slots = s_->KeySlots(key);
    EXPECT_TRUE(slots.ok());
    std::pair<uint64_t, uint64_t> found{0, 0};
    for (const auto& slot : *slots) {
      if (slot.second == 0) continue;
      EXPECT_EQ(found.first, 0u) << "more than one occupied slot";
      found = slot;
    }
    return found;
  }
  uint8_t Fingerprint(absl::string_view key) const {
    return layout::PlaceKey(key, s_->layout().groups).fingerprint;
  }

  // Reads the buckets; the number of block reads that followed (0 when
  // every candidate was known), or -1 when the snapshot was not trusted.
  int Refresh(BucketSnapshot& snap, OpRounds& rounds, absl::Duration block_delay = {}) {
    snap.PostRead(rounds);
    EXPECT_TRUE(s_->Run(rounds).ok());
    absl::StatusOr<bool> reading = snap.OnBuckets(rounds);
    EXPECT_TRUE(reading.ok()) << reading.status();
    if (!reading.value_or(false)) return 0;
    const int reads = static_cast<int>(rounds.requests().size());
    EXPECT_TRUE(s_->Run(rounds).ok());
    s_->Advance(block_delay);
    return snap.OnBlocks() ? reads : -1;
  }

  uint64_t next_block_ = 0;
};

TEST_F(BucketSnapshotTest, FindsTheCommittedSlotAndTrustsNothingElse) {
  ASSERT_TRUE(client_->Put("k", "v1").ok());
  const auto [committed_at, committed] = OnlySlot("k");
  const uint8_t fp = Fingerprint("k");
  // A pending claim of the key, a slot of another fingerprint naming a
  // block of the key, and a committed slot of the key's fingerprint naming
  // another key's block (a fingerprint collision).
  const uint64_t pending = PlantBlock("k", "pending", fp) | layout::kPendingBit;
  PlantSlot("k", pending);
  const uint64_t other_fp = PlantBlock("k", "other", static_cast<uint8_t>(fp + 1));
  PlantSlot("k", other_fp);
  const uint64_t collision = PlantBlock("not-k", "x", fp);
  PlantSlot("k", collision);

  std::optional<BucketSnapshot> snap = BucketSnapshot::Create(*s_, "k", /*keep_values=*/true);
  ASSERT_TRUE(snap.has_value());
  OpRounds rounds(*s_);
  // The committed, pending and colliding blocks are read; the other
  // fingerprint's is not.
  EXPECT_EQ(Refresh(*snap, rounds), 3);
  const BucketSnapshot::SlotSeen* found = snap->FindCommitted();
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->offset, committed_at);
  EXPECT_EQ(found->word, committed);
  EXPECT_EQ(snap->ValueOf(found->word), "v1");
  EXPECT_TRUE(snap->KeyMatches(pending)) << "the claim's block is the key's, but not committed";
  EXPECT_FALSE(snap->KeyMatches(collision));
  EXPECT_FALSE(snap->KeyMatches(other_fp));
}

TEST_F(BucketSnapshotTest, AbsentKeyHasNoCommittedSlot) {
  ASSERT_TRUE(client_->Put("k", "v1").ok());
  PlantSlot("k", PlantBlock("k", "pending", Fingerprint("k")) | layout::kPendingBit);
  std::optional<BucketSnapshot> snap = BucketSnapshot::Create(*s_, "k", false);
  ASSERT_TRUE(snap.has_value());
  OpRounds rounds(*s_);
  ASSERT_TRUE(client_->Delete("k").ok());
  Refresh(*snap, rounds);
  EXPECT_EQ(snap->FindCommitted(), nullptr);
}

TEST_F(BucketSnapshotTest, KnownBlocksAreReadAgainOnlyAfterHalfAGracePeriod) {
  ASSERT_TRUE(client_->Put("k", "v1").ok());
  std::optional<BucketSnapshot> snap = BucketSnapshot::Create(*s_, "k", true);
  ASSERT_TRUE(snap.has_value());
  OpRounds rounds(*s_);
  EXPECT_EQ(Refresh(*snap, rounds), 1);
  EXPECT_EQ(Refresh(*snap, rounds), 0) << "the block is known";
  ASSERT_NE(snap->FindCommitted(), nullptr);
  s_->Advance(s_->options().grace_period / 2 + absl::Milliseconds(1));
  EXPECT_EQ(Refresh(*snap, rounds), 1) << "the knowledge has expired";
  snap->Forget();
  EXPECT_EQ(Refresh(*snap, rounds), 1);
}

TEST_F(BucketSnapshotTest, LateOrTornBlockReadsAreNotTrusted) {
  ASSERT_TRUE(client_->Put("k", "v1").ok());
  std::optional<BucketSnapshot> snap = BucketSnapshot::Create(*s_, "k", true);
  ASSERT_TRUE(snap.has_value());
  OpRounds rounds(*s_);
  // A block read completed a grace period after the buckets were read may
  // show a reused block.
  EXPECT_EQ(Refresh(*snap, rounds, s_->options().grace_period + absl::Milliseconds(1)), -1);
  snap->Forget();
  EXPECT_EQ(Refresh(*snap, rounds), 1);

  // A block of the key whose bytes changed under its checksum.
  const uint64_t word = PlantBlock("k", "torn", Fingerprint("k"));
  ASSERT_TRUE(
      s_->WriteBytes(layout::Slot::Decode(word).offset + layout::kBlockHeaderBytes + 1, "X").ok());
  PlantSlot("k", word);
  EXPECT_EQ(Refresh(*snap, rounds), -1);
  snap->Forget();
  EXPECT_EQ(Refresh(*snap, rounds), -1) << "still torn";
}

// The test hook that skips checksums takes a torn block for whole: what the
// linearizability test shows the checker catching.
TEST_F(BucketSnapshotTest, TheChecksumSkippingHookTrustsTornBlocks) {
  Reset({.skip_block_checksum = true});
  const uint64_t word = PlantBlock("k", "torn", Fingerprint("k"));
  ASSERT_TRUE(
      s_->WriteBytes(layout::Slot::Decode(word).offset + layout::kBlockHeaderBytes + 1, "X").ok());
  PlantSlot("k", word);
  std::optional<BucketSnapshot> snap = BucketSnapshot::Create(*s_, "k", true);
  ASSERT_TRUE(snap.has_value());
  OpRounds rounds(*s_);
  EXPECT_EQ(Refresh(*snap, rounds), 1);
  ASSERT_NE(snap->FindCommitted(), nullptr);
  EXPECT_EQ(snap->ValueOf(word), "Xorn");
}

TEST_F(BucketSnapshotTest, OwnBlockIsNeverRead) {
  const uint64_t word = PlantBlock("k", "mine", Fingerprint("k"));
  PlantSlot("k", word | layout::kPendingBit);
  std::optional<BucketSnapshot> snap = BucketSnapshot::Create(*s_, "k", false);
  ASSERT_TRUE(snap.has_value());
  snap->SetOwnBlock(word);
  OpRounds rounds(*s_);
  EXPECT_EQ(Refresh(*snap, rounds), 0);
  EXPECT_TRUE(snap->KeyMatches(word | layout::kPendingBit));
  EXPECT_EQ(snap->FindCommitted(), nullptr);
}

TEST_F(BucketSnapshotTest, EverySlotOnceEvenWhenBothBucketsShareTheirOverflow) {
  // A key whose two combined buckets are the two of one group, and one
  // whose buckets lie in different groups.
  std::string shared, apart;
  for (int i = 0; i < 1'000'000 && (shared.empty() || apart.empty()); ++i) {
    const std::string key = "key" + std::to_string(i);
    const layout::KeyPlacement p = layout::PlaceKey(key, s_->layout().groups);
    (p.group[0] == p.group[1] ? shared : apart) = key;
  }
  ASSERT_FALSE(shared.empty());
  ASSERT_FALSE(apart.empty());
  for (const std::string& key : {shared, apart}) {
    std::optional<BucketSnapshot> snap = BucketSnapshot::Create(*s_, key, false);
    ASSERT_TRUE(snap.has_value());
    OpRounds rounds(*s_);
    Refresh(*snap, rounds);
    EXPECT_EQ(snap->slots().size(),
              key == shared ? 3 * layout::kSlotsPerBucket : 2 * layout::kSlotsPerCombinedBucket)
        << key;
  }
}

}  // namespace
}  // namespace rkv::testing
