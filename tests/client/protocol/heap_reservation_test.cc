// HeapReservation against a real region in the simulation: blocks never
// overlap, across sessions too; once the heap cursor has run out the free
// pool is popped last node first, a lost pop CAS or a reused node is
// retried, and an empty pool means a full heap. And FreePoolPush, which
// fills the pool: a push whose CAS lost links its node to the head it
// found, so that no node is ever cut off.
#include "client/protocol/heap_reservation.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "client/protocol/free_pool_push.h"
#include "gtest/gtest.h"
#include "tests/client/protocol/part_test_session.h"

namespace rkv::testing {
namespace {

using client_internal::FreePoolPush;
using client_internal::HeapReservation;
using client_internal::OpRounds;

class HeapReservationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto env = KvTestEnv::Create(KvBackend::kSoftSim, {.region_bytes = 4 << 20});
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = std::move(env).value();
    s_ = NewSession(1);
  }

  std::unique_ptr<PartTestSession> NewSession(uint64_t seed) {
    auto s = PartTestSession::Create(*env_, seed);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Reserves a block of `size_class`, running every round it needs.
  static absl::StatusOr<uint64_t> Reserve(PartTestSession& s, uint8_t size_class,
                                          OpCosts* costs = nullptr) {
    std::optional<HeapReservation> r = HeapReservation::Create(s, size_class);
    if (!r.has_value()) return absl::ResourceExhaustedError("scratch");
    OpRounds rounds(s);
    absl::StatusOr<uint64_t> block = r->Start(rounds);
    while (block.ok() && *block == 0) {
      if (absl::Status st = s.Run(rounds); !st.ok()) return st;
      block = r->OnRound(rounds);
    }
    if (costs != nullptr) *costs = rounds.costs();
    return block;
  }

  // Runs a push's rounds; `between` runs after each round but the last.
  static absl::Status Push(PartTestSession& s, uint8_t size_class,
                           const std::vector<uint64_t>& blocks, uint64_t head_guess,
                           const std::function<void()>& between = nullptr) {
    std::optional<FreePoolPush> push = FreePoolPush::Create(s, size_class, blocks, head_guess);
    if (!push.has_value()) return absl::ResourceExhaustedError("scratch");
    OpRounds rounds(s);
    push->Start(rounds);
    for (;;) {
      if (absl::Status st = s.Run(rounds); !st.ok()) return st;
      absl::StatusOr<bool> done = push->OnRound(rounds);
      if (!done.ok() || *done) return done.status();
      if (between) between();
    }
  }

  // Writes a free-pool node of class `c` at `at` listing `blocks`.
  void WriteNode(uint8_t c, uint64_t at, uint64_t next, std::vector<uint64_t> blocks) {
    std::string buf(layout::FreeNodeBytes(c), '\0');
    layout::EncodeFreeNode({next, std::move(blocks)}, c, reinterpret_cast<uint8_t*>(buf.data()));
    ASSERT_TRUE(s_->WriteBytes(at, buf).ok());
  }
  void SetHead(uint8_t c, uint16_t tag, uint64_t node) {
    ASSERT_TRUE(
        s_->WriteWord(layout::FreePoolHeadOffset(c), layout::FreePoolHead{tag, node}.Encode())
            .ok());
  }
  layout::FreePoolHead Head(uint8_t c) {
    auto w = s_->ReadWord(layout::FreePoolHeadOffset(c));
    EXPECT_TRUE(w.ok());
    return layout::FreePoolHead::Decode(w.value_or(0));
  }
  // The heap cursor past the end: every chunk FAA from now on fails.
  void ExhaustCursor() {
    ASSERT_TRUE(s_->WriteWord(layout::HeaderOffsets::kHeapCursor, s_->layout().heap_bytes).ok());
  }
  // Block `i` of class `c` from the heap's start (nothing else uses the
  // heap in these tests once the cursor is exhausted up front).
  uint64_t BlockAt(uint8_t c, uint64_t i) const {
    return s_->layout().heap_offset + i * layout::ClassBytes(c);
  }

  std::unique_ptr<KvTestEnv> env_;
  std::unique_ptr<PartTestSession> s_;
};

TEST_F(HeapReservationTest, BlocksOfTwoSessionsNeverOverlap) {
  std::unique_ptr<PartTestSession> other = NewSession(2);
  struct Extent {
    uint64_t begin, end;
  };
  std::vector<Extent> extents;
  const uint8_t classes[] = {1, 3, 16, 64, 70};
  for (int i = 0; i < 300; ++i) {
    const uint8_t c = classes[i % 5];
    PartTestSession& s = i % 2 ? *other : *s_;
    absl::StatusOr<uint64_t> block = Reserve(s, c);
    ASSERT_TRUE(block.ok()) << block.status();
    EXPECT_EQ((*block - s.layout().heap_offset) % layout::kBlockAlign, 0u);
    EXPECT_GE(*block, s.layout().heap_offset);
    EXPECT_LE(*block + layout::ClassBytes(c), s.layout().region_bytes);
    extents.push_back({*block, *block + layout::ClassBytes(c)});
  }
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < extents.size(); ++i) {
    EXPECT_LE(extents[i - 1].end, extents[i].begin) << "blocks " << i - 1 << " and " << i;
  }
}

TEST_F(HeapReservationTest, PopsTheFreePoolLastNodeFirst) {
  const uint8_t c = 2;
  ExhaustCursor();
  // Pushed first: node B0 listing B1, B2; then node B3 listing B4.
  WriteNode(c, BlockAt(c, 0), 0, {BlockAt(c, 1), BlockAt(c, 2)});
  WriteNode(c, BlockAt(c, 3), BlockAt(c, 0), {BlockAt(c, 4)});
  SetHead(c, 7, BlockAt(c, 3));

  std::vector<uint64_t> got;
  OpCosts first;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<uint64_t> block = Reserve(*s_, c, i == 0 ? &first : nullptr);
    ASSERT_TRUE(block.ok()) << i << ": " << block.status();
    got.push_back(*block);
  }
  // A node's own block first, then the blocks it lists, last listed first.
  EXPECT_EQ(got, (std::vector<uint64_t>{BlockAt(c, 3), BlockAt(c, 4), BlockAt(c, 0), BlockAt(c, 2),
                                        BlockAt(c, 1)}));
  // The chunk FAA, then the pop: head, node, CAS.
  EXPECT_EQ(first.round_trips, 4u);
  EXPECT_EQ(first.retries, 0u);
  EXPECT_EQ(Head(c).node, 0u);
  EXPECT_EQ(Head(c).tag, 9) << "every pop bumps the tag";
  absl::StatusOr<uint64_t> none = Reserve(*s_, c);
  EXPECT_TRUE(absl::IsResourceExhausted(none.status())) << none.status();
}

TEST_F(HeapReservationTest, APopWhoseCasLostStartsOverFromTheHead) {
  const uint8_t c = 2;
  ExhaustCursor();
  WriteNode(c, BlockAt(c, 0), 0, {BlockAt(c, 1)});
  SetHead(c, 1, BlockAt(c, 0));

  std::optional<HeapReservation> r = HeapReservation::Create(*s_, c);
  ASSERT_TRUE(r.has_value());
  OpRounds rounds(*s_);
  ASSERT_EQ(r->Start(rounds).value_or(1), 0u);
  for (int step = 0; step < 3; ++step) {  // The chunk FAA, the head, the node.
    ASSERT_TRUE(s_->Run(rounds).ok());
    ASSERT_EQ(r->OnRound(rounds).value_or(1), 0u);
  }
  // The pop CAS is posted. Meanwhile a rival pops the node and pushes it
  // back: same node, another tag.
  SetHead(c, 3, BlockAt(c, 0));
  ASSERT_TRUE(s_->Run(rounds).ok());
  absl::StatusOr<uint64_t> block = r->OnRound(rounds);
  ASSERT_EQ(block.value_or(1), 0u) << "the lost CAS must not take the node";
  EXPECT_EQ(rounds.costs().retries, 1u);
  while (block.ok() && *block == 0) {
    ASSERT_TRUE(s_->Run(rounds).ok());
    block = r->OnRound(rounds);
  }
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_EQ(*block, BlockAt(c, 0));
  EXPECT_EQ(rounds.costs().retries, 1u);
  EXPECT_EQ(Head(c).tag, 4);
  EXPECT_EQ(Head(c).node, 0u);
}

TEST_F(HeapReservationTest, ANodeThatNeverChecksOutExhaustsTheRetries) {
  const uint8_t c = 2;
  ExhaustCursor();
  // The head names a block that holds no node (as after a rival popped
  // and reused it): every pop attempt fails its checks.
  ASSERT_TRUE(s_->WriteBytes(BlockAt(c, 0), std::string(layout::ClassBytes(c), 'x')).ok());
  SetHead(c, 1, BlockAt(c, 0));
  OpCosts costs;
  absl::StatusOr<uint64_t> block = Reserve(*s_, c, &costs);
  EXPECT_TRUE(absl::IsUnavailable(block.status())) << block.status();
  EXPECT_EQ(costs.retries, static_cast<uint64_t>(OpRounds::kMaxRetries) + 1);
  EXPECT_EQ(Head(c).node, BlockAt(c, 0)) << "nothing was popped";
}

TEST_F(HeapReservationTest, APushWhoseCasLostLinksToTheHeadItFound) {
  const uint8_t c = 4;
  ExhaustCursor();
  // Another client's node A (listing B) heads the pool; ours guesses an
  // empty pool, loses its first CAS, and links its node to A.
  WriteNode(c, BlockAt(c, 0), 0, {BlockAt(c, 1)});
  SetHead(c, 3, BlockAt(c, 0));
  const std::vector<uint64_t> ours = {BlockAt(c, 10), BlockAt(c, 11), BlockAt(c, 12)};
  int rounds = 0;
  ASSERT_TRUE(Push(*s_, c, ours, /*head_guess=*/0, [&] { rounds++; }).ok());
  EXPECT_EQ(rounds, 1);  // One lost CAS, then the one that took.
  EXPECT_EQ(Head(c).node, ours[0]);
  EXPECT_EQ(Head(c).tag, 4);
  // Pops give our blocks (our node last of them), then A's.
  std::vector<uint64_t> got;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<uint64_t> b = Reserve(*s_, c);
    ASSERT_TRUE(b.ok()) << b.status();
    got.push_back(*b);
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint64_t>{BlockAt(c, 0), BlockAt(c, 1), BlockAt(c, 10),
                                        BlockAt(c, 11), BlockAt(c, 12)}));
  EXPECT_TRUE(absl::IsResourceExhausted(Reserve(*s_, c).status()));
}

TEST_F(HeapReservationTest, APushUnderEndlessRivalsGivesUpAndKeepsItsBlocks) {
  const uint8_t c = 4;
  // Every round, a rival swings the head first.
  uint16_t tag = 0;
  const std::vector<uint64_t> blocks = {BlockAt(c, 7)};
  std::optional<FreePoolPush> push = FreePoolPush::Create(*s_, c, blocks, 0);
  ASSERT_TRUE(push.has_value());
  OpRounds rounds(*s_);
  push->Start(rounds);
  absl::StatusOr<bool> done = false;
  while (done.ok() && !*done) {
    SetHead(c, ++tag, 0);
    ASSERT_TRUE(s_->Run(rounds).ok());
    done = push->OnRound(rounds);
  }
  EXPECT_TRUE(absl::IsUnavailable(done.status())) << done.status();
  EXPECT_EQ(push->blocks()[0], BlockAt(c, 7));
  EXPECT_EQ(Head(c).node, 0u);  // Never linked.
}

TEST_F(HeapReservationTest, AnEmptyPoolPastTheCursorIsAFullHeap) {
  ExhaustCursor();
  absl::StatusOr<uint64_t> block = Reserve(*s_, 5);
  EXPECT_TRUE(absl::IsResourceExhausted(block.status())) << block.status();
}

}  // namespace
}  // namespace rkv::testing
