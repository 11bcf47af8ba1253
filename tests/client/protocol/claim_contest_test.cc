// ClaimContest against a real region in the simulation, its rounds driven
// one at a time so that rival publishers interleave as a test chooses:
// however two claims of one key race, exactly one slot ends up committed
// and no claim is left behind; a key committed already is left to the
// caller; a key with no free slot is refused. The test hook that skips
// settling shows what the contest prevents.
#include "client/protocol/claim_contest.h"

#include <string>
#include <vector>

#include "common/random.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "tests/client/protocol/part_test_session.h"

namespace rkv::testing {
namespace {

using client_internal::BucketSnapshot;
using client_internal::ClaimContest;
using client_internal::OpRounds;
using Outcome = ClaimContest::Outcome;

// One key's publication, through the parts KvOperation drives for an
// INSERT, one round per Step.
class Publisher {
 public:
  Publisher(PartTestSession& s, std::string key, std::string value)
      : s_(s), key_(std::move(key)), value_(std::move(value)), rounds_(s) {}

  // Writes our block (where nothing else is), then posts the first bucket
  // read.
  absl::Status Begin(uint64_t block_at) {
    snapshot_ = BucketSnapshot::Create(s_, key_, false);
    if (!snapshot_.has_value()) return absl::ResourceExhaustedError("scratch");
    contest_ = ClaimContest::Create(s_, *snapshot_, key_);
    if (!contest_.has_value()) return absl::ResourceExhaustedError("scratch");
    std::string block;
    layout::EncodeBlock(key_, value_, &block);
    RKV_RETURN_IF_ERROR(s_.WriteBytes(block_at, block));
    word_ = layout::Slot{snapshot_->placement().fingerprint,
                         layout::ClassFor(layout::BlockBytes(key_.size(), value_.size())), block_at,
                         false}
                .Encode();
    snapshot_->SetOwnBlock(word_);
    contest_->SetWord(word_);
    Reread();
    return absl::OkStatus();
  }

  // Runs the round posted last; the contest's outcome once it has one.
  absl::StatusOr<std::optional<Outcome>> Step() {
    RKV_RETURN_IF_ERROR(s_.Run(rounds_));
    switch (after_) {
      case After::kBuckets:
        return AfterBuckets();
      case After::kBlocks:
        if (!snapshot_->OnBlocks()) {
          snapshot_->Forget();
          Reread();
          return std::nullopt;
        }
        return Handle(contest_->Decide(rounds_));
      case After::kContest:
        return Handle(contest_->OnRound(rounds_));
    }
    return std::nullopt;
  }

  uint64_t word() const { return word_; }
  const ClaimContest& contest() const { return *contest_; }

 private:
  enum class After { kBuckets, kBlocks, kContest };

  void Reread() {
    snapshot_->PostRead(rounds_);
    after_ = After::kBuckets;
  }
  absl::StatusOr<std::optional<Outcome>> AfterBuckets() {
    RKV_ASSIGN_OR_RETURN(bool reading, snapshot_->OnBuckets(rounds_));
    if (reading) {
      after_ = After::kBlocks;
      return std::nullopt;
    }
    return Handle(contest_->Decide(rounds_));
  }
  absl::StatusOr<std::optional<Outcome>> Handle(Outcome o) {
    switch (o) {
      case Outcome::kPosted:
        after_ = After::kContest;
        return std::nullopt;
      case Outcome::kReread:
        Reread();
        return std::nullopt;
      case Outcome::kBucketsRead:
        return AfterBuckets();
      default:
        return o;
    }
  }

  PartTestSession& s_;
  const std::string key_;
  const std::string value_;
  OpRounds rounds_;
  std::optional<BucketSnapshot> snapshot_;
  std::optional<ClaimContest> contest_;
  uint64_t word_ = 0;
  After after_ = After::kBuckets;
};

// Steps two publishers a round each at a time until both are decided (or
// 100 rounds pass); returns how each ended.
std::pair<std::optional<Outcome>, std::optional<Outcome>> InLockstep(Publisher& a, Publisher& b) {
  std::optional<Outcome> oa, ob;
  for (int round = 0; round < 100 && !(oa && ob); ++round) {
    if (!oa) oa = a.Step().value_or(Outcome::kPosted);
    if (!ob) ob = b.Step().value_or(Outcome::kPosted);
  }
  return {oa, ob};
}

class ClaimContestTest : public ::testing::Test {
 protected:
  void Reset(uint64_t seed, const client_internal::BrokenProtocol& broken = {}) {
    sessions_.clear();
    auto env = KvTestEnv::Create(KvBackend::kSoftSim, {.region_bytes = 4 << 20}, seed);
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = std::move(env).value();
    for (uint64_t i = 0; i < 2; ++i) {
      auto s = PartTestSession::Create(*env_, seed * 2 + i, broken);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(s).value());
    }
  }
  // A block place of its own for publisher `i`, at the heap's end.
  uint64_t BlockAt(int i) const { return sessions_[0]->layout().region_bytes - 4096 * (i + 1); }

  // Runs both publishers to their outcomes, the rounds interleaved by `rng`.
  std::vector<Outcome> Race(std::vector<Publisher*> pubs, Rng& rng) {
    std::vector<std::optional<Outcome>> out(pubs.size());
    for (int guard = 0; guard < 1000; ++guard) {
      std::vector<size_t> running;
      for (size_t i = 0; i < pubs.size(); ++i) {
        if (!out[i].has_value()) running.push_back(i);
      }
      if (running.empty()) break;
      const size_t i = running[rng.Uniform(running.size())];
      absl::StatusOr<std::optional<Outcome>> o = pubs[i]->Step();
      EXPECT_TRUE(o.ok()) << o.status();
      if (!o.ok()) break;
      out[i] = *o;
    }
    std::vector<Outcome> result;
    for (const auto& o : out) {
      EXPECT_TRUE(o.has_value()) << "a publisher never finished";
      result.push_back(o.value_or(Outcome::kPosted));
    }
    return result;
  }

  // The key's slots that name either block, by state.
  struct Census {
    std::vector<std::pair<uint64_t, uint64_t>> committed;
    int claims = 0;  // Pending or killed.
  };
  Census Count(absl::string_view key, const std::vector<uint64_t>& words) {
    Census c;
    auto slots = sessions_[0]->KeySlots(key);
    EXPECT_TRUE(slots.ok());
    for (const auto& [off, word] : *slots) {
      if (word == 0) continue;
      if (std::find(words.begin(), words.end(), layout::CommittedOf(word)) == words.end()) continue;
      if (layout::IsCommitted(word)) {
        c.committed.emplace_back(off, word);
      } else {
        c.claims++;
      }
    }
    return c;
  }

  std::unique_ptr<KvTestEnv> env_;
  std::vector<std::unique_ptr<PartTestSession>> sessions_;
};

TEST_F(ClaimContestTest, TwoRacingClaimsLeaveExactlyOneCommittedSlot) {
  int both_claimed = 0, first_won = 0, second_won = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    Reset(seed);
    Publisher a(*sessions_[0], "k", "a"), b(*sessions_[1], "k", "b");
    ASSERT_TRUE(a.Begin(BlockAt(0)).ok());
    ASSERT_TRUE(b.Begin(BlockAt(1)).ok());
    Rng rng(seed);
    const std::vector<Outcome> out = Race({&a, &b}, rng);
    ASSERT_EQ(out.size(), 2u);
    // One publisher's write took effect; the other found it committed.
    const int winner = out[0] == Outcome::kDone ? 0 : 1;
    EXPECT_EQ(out[winner], Outcome::kDone);
    EXPECT_EQ(out[1 - winner], Outcome::kCommittedElsewhere);
    const Publisher& won = winner == 0 ? a : b;
    const Publisher& lost = winner == 0 ? b : a;
    const Census c = Count("k", {a.word(), b.word()});
    ASSERT_EQ(c.committed.size(), 1u);
    EXPECT_EQ(c.committed[0].second, won.word());
    EXPECT_EQ(c.claims, 0) << "a claim was left behind";
    EXPECT_EQ(lost.contest().committed().offset, c.committed[0].first);
    EXPECT_EQ(lost.contest().committed().word, c.committed[0].second);
    both_claimed += a.contest().ever_claimed() && b.contest().ever_claimed();
    (winner == 0 ? first_won : second_won)++;
  }
  // The interleavings did make both claim at once, and either may win.
  EXPECT_GT(both_claimed, 0);
  EXPECT_GT(first_won, 0);
  EXPECT_GT(second_won, 0);
}

TEST_F(ClaimContestTest, ClaimsOfRoundsInLockstepSettleOnOneSlot) {
  // Both read, both claim, both re-read: each sees the other's claim
  // (the later one sees both), and the contest must settle it.
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(seed);
    Reset(seed);
    Publisher a(*sessions_[0], "k", "a"), b(*sessions_[1], "k", "b");
    ASSERT_TRUE(a.Begin(BlockAt(0)).ok());
    ASSERT_TRUE(b.Begin(BlockAt(1)).ok());
    auto [oa, ob] = InLockstep(a, b);
    ASSERT_TRUE(oa && ob);
    EXPECT_NE(*oa == Outcome::kDone, *ob == Outcome::kDone) << "exactly one takes effect";
    EXPECT_TRUE(a.contest().ever_claimed() && b.contest().ever_claimed());
    const Census c = Count("k", {a.word(), b.word()});
    EXPECT_EQ(c.committed.size(), 1u);
    EXPECT_EQ(c.claims, 0);
  }
}

TEST_F(ClaimContestTest, AKeyCommittedAlreadyIsLeftToTheCaller) {
  Reset(1);
  auto client = env_->NewClient();
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Put("k", "there").ok());
  Publisher p(*sessions_[0], "k", "late");
  ASSERT_TRUE(p.Begin(BlockAt(0)).ok());
  Rng rng(1);
  const std::vector<Outcome> out = Race({&p}, rng);
  EXPECT_EQ(out, std::vector<Outcome>{Outcome::kCommittedElsewhere});
  EXPECT_FALSE(p.contest().ever_claimed()) << "nothing claimed, so nothing to undo";
  auto slots = sessions_[0]->KeySlots("k");
  ASSERT_TRUE(slots.ok());
  for (const auto& [off, word] : *slots) {
    if (word != 0) {
      EXPECT_EQ(p.contest().committed().word, word);
    }
  }
}

TEST_F(ClaimContestTest, NoFreeSlotIsIndexFull) {
  Reset(1);
  PartTestSession& s = *sessions_[0];
  // Every slot of the key's buckets taken by another fingerprint's key.
  const uint8_t other =
      static_cast<uint8_t>(layout::PlaceKey("k", s.layout().groups).fingerprint + 1);
  auto slots = s.KeySlots("k");
  ASSERT_TRUE(slots.ok());
  for (const auto& [off, word] : *slots) {
    ASSERT_TRUE(
        s.WriteWord(off, layout::Slot{other, 1, s.layout().heap_offset, false}.Encode()).ok());
  }
  Publisher p(s, "k", "v");
  ASSERT_TRUE(p.Begin(BlockAt(0)).ok());
  Rng rng(1);
  EXPECT_EQ(Race({&p}, rng), std::vector<Outcome>{Outcome::kIndexFull});
  EXPECT_FALSE(p.contest().ever_claimed());
}

// Without settling, two claims of one key made in lockstep both commit:
// the broken state the linearizability checker is shown to catch.
TEST_F(ClaimContestTest, SkippingSettlementCommitsTwice) {
  bool twice = false;
  for (uint64_t seed = 1; seed <= 20 && !twice; ++seed) {
    Reset(seed, {.skip_conflict_resolution = true});
    Publisher a(*sessions_[0], "k", "a"), b(*sessions_[1], "k", "b");
    ASSERT_TRUE(a.Begin(BlockAt(0)).ok());
    ASSERT_TRUE(b.Begin(BlockAt(1)).ok());
    InLockstep(a, b);
    twice = Count("k", {a.word(), b.word()}).committed.size() == 2;
  }
  EXPECT_TRUE(twice);
}

}  // namespace
}  // namespace rkv::testing
