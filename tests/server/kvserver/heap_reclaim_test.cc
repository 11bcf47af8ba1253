// The heap census (server/kvserver/heap_reclaim.h): the heap that crashed
// client sessions held comes back to the free pool while the server
// serves, and nothing a live session holds goes with it. The server's
// checks and the clients' clocks are driven by hand.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/kvserver/heap_census.h"
#include "server/kvserver/region_server.h"
#include "tests/client/region/kv_test_env.h"
#include "tests/client/region/manual_clock.h"
#include "tests/common/fabric/verbs_test_setup.h"

namespace rkv::testing {
namespace {

constexpr absl::Duration kLease = absl::Seconds(2);
constexpr int kCrashes = 40;

// A backend, and the copies of the region (the primary runs the census).
using Param = std::tuple<KvBackend, int>;

class HeapReclaimTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    // A heap of about 750 KiB, and chunks of a 32nd of it: a few dozen
    // crashed writers hold it all unless it comes back.
    auto env = KvTestEnv::Create(std::get<0>(GetParam()),
                                 {.region_bytes = 1 << 20,
                                  .grace_period = absl::Milliseconds(20),
                                  .client_lease = kLease,
                                  .session_slots = 64,
                                  .lease_thread = false},
                                 /*sim_seed=*/1, std::get<1>(GetParam()));
    if (!env.ok()) RKV_SKIP_OR_FAIL(env.status());
    env_ = std::move(env).value();
  }

  std::unique_ptr<client_internal::RegionClient> Open(const ManualClock& clock) {
    return OpenOn(*env_, clock);
  }
  // Every copy checks its leases (each fences on its own).
  void CheckLeases(absl::Time now) {
    env_->server->CheckLeases(now);
    for (const auto& b : env_->backups) b->CheckLeases(now);
  }

  std::unique_ptr<KvTestEnv> env_;
};

// A block in the free pool.
struct Pooled {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  friend bool operator<(const Pooled& a, const Pooled& b) { return a.offset < b.offset; }
};

// Every block in the region's free pool, by walking it (nobody else runs),
// sorted: false in *whole if a node fails its checks.
std::vector<Pooled> PooledBlocks(const uint8_t* memory, const layout::Layout& l, bool* whole) {
  std::vector<Pooled> blocks;
  *whole = true;
  for (int c = 1; c < 256; ++c) {
    const auto size_class = static_cast<uint8_t>(c);
    const uint64_t block = layout::ClassBytes(size_class);
    uint64_t budget = l.heap_bytes / block + 1;
    *whole &= server::WalkFreePool(memory, l, size_class, &budget,
                                   [&](uint64_t node, const layout::FreeNode& contents) {
                                     blocks.push_back({node, block});
                                     for (uint64_t b : contents.blocks)
                                       blocks.push_back({b, block});
                                   });
  }
  std::sort(blocks.begin(), blocks.end());
  return blocks;
}

// Whether a pooled block overlaps [offset, offset + bytes) (or another
// pooled block, with bytes 0).
bool Overlaps(const std::vector<Pooled>& pooled, uint64_t offset, uint64_t bytes) {
  auto it = std::upper_bound(pooled.begin(), pooled.end(), Pooled{offset, 0});
  if (it != pooled.end() && it->offset < offset + bytes) return true;
  return it != pooled.begin() && std::prev(it)->offset + std::prev(it)->bytes > offset;
}

// Checks the primary's pool: no block in it twice, and none that a slot
// of any copy names.
void ExpectPoolSound(const KvTestEnv& env) {
  const layout::Layout& l = env.server->layout();
  bool whole = false;
  const std::vector<Pooled> pooled = PooledBlocks(env.server->MemoryForTesting(), l, &whole);
  ASSERT_TRUE(whole);
  for (size_t i = 1; i < pooled.size(); ++i) {
    EXPECT_LE(pooled[i - 1].offset + pooled[i - 1].bytes, pooled[i].offset)
        << "blocks in the free pool overlap (one is pooled twice)";
  }
  std::vector<const uint8_t*> copies = {env.server->MemoryForTesting()};
  for (const auto& b : env.backups) copies.push_back(b->MemoryForTesting());
  for (size_t c = 0; c < copies.size(); ++c) {
    layout::ForEachSlot(l, [&](uint64_t offset) {
      uint64_t word;
      std::memcpy(&word, copies[c] + offset, 8);
      if (word == 0) return;
      const layout::Slot s = layout::Slot::Decode(layout::CommittedOf(word));
      EXPECT_FALSE(Overlaps(pooled, s.offset, layout::ClassBytes(s.size_class)))
          << "a block a slot of copy " << c << " names is in the free pool";
    });
  }
}

std::string Value(int i, int version) {
  return absl::StrCat(std::string(900, 'a' + i % 26), version);
}

TEST_P(HeapReclaimTest, CrashedWritersHeapComesBackWhileALiveWriterKeepsAllItHolds) {
  ManualClock clock;  // Everyone's, the server's too.
  auto live = Open(clock);
  ASSERT_NE(live, nullptr);
  constexpr int kLiveKeys = 20;
  std::vector<int> version(kLiveKeys, 0);
  for (int k = 0; k < kLiveKeys; ++k) {
    ASSERT_TRUE(live->Put(absl::StrCat("live", k), Value(k, 0)).ok()) << k;
  }
  // The live writer updates its keys (freeing a block each time, which it
  // holds through the grace period and then reuses) as time passes.
  int next = 0;
  const auto step = [&](absl::Duration d) {
    clock.Advance(d);
    const int k = next++ % kLiveKeys;
    const absl::Status s = live->Put(absl::StrCat("live", k), Value(k, ++version[k]));
    EXPECT_TRUE(s.ok()) << s;
    CheckLeases(clock.now());
  };
  std::vector<std::unique_ptr<client_internal::RegionClient>> crashed;
  for (int i = 0; i < kCrashes; ++i) {
    // A writer takes a chunk, writes and rewrites a few keys (holding the
    // blocks it replaced), and is never heard from again: as a process
    // killed (its object stays, unpolled, until the end).
    auto w = Open(clock);
    ASSERT_NE(w, nullptr);
    for (int k = 0; k < 4; ++k) {
      const std::string key = absl::StrCat("crashed", i, "-", k);
      ASSERT_TRUE(w->Put(key, Value(k, 0)).ok()) << i;
      ASSERT_TRUE(w->Put(key, Value(k, 1)).ok()) << i;
    }
    crashed.push_back(std::move(w));
    // A lease and a little more, the server checking every eighth of one:
    // the writer is fenced, and a census round takes its heap back.
    for (int s = 0; s < 12; ++s) {
      // After every fourth crash, short-lived clients come and go, some
      // while a round is under way: what one hands back at close may miss
      // the pool walk, so the round scans anew rather than pool it twice.
      if (i % 4 == 0) {
        auto brief = Open(clock);
        ASSERT_NE(brief, nullptr);
        ASSERT_TRUE(brief->Put(absl::StrCat("brief", i, "-", s), Value(s, 0)).ok());
      }
      step(kLease / 8);
    }
    for (int s = 0; s < 20; ++s) step(absl::Milliseconds(5));
  }
  const server::RegionStats st = env_->server->Stats();
  EXPECT_EQ(st.sessions_fenced, uint64_t{kCrashes});
  // Each crashed writer held most of a chunk.
  EXPECT_GT(st.heap_reclaimed, uint64_t{kCrashes} * (env_->server->layout().heap_bytes / 64));
  // Nothing the live writer held was handed to anyone: every value reads
  // back as written (a block given twice would hold another key's value).
  for (int k = 0; k < kLiveKeys; ++k) {
    auto v = live->Get(absl::StrCat("live", k));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, Value(k, version[k])) << k;
  }
  for (int i = 0; i < kCrashes; ++i) {
    for (int k = 0; k < 4; ++k) {
      auto v = live->Get(absl::StrCat("crashed", i, "-", k));
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(*v, Value(k, 1));
    }
  }
  // And the heap serves new writers: what came back is in use.
  auto fresh = Open(clock);
  ASSERT_NE(fresh, nullptr);
  for (int k = 0; k < 100; ++k) {
    ASSERT_TRUE(fresh->Put(absl::StrCat("fresh", k), Value(k, 2)).ok()) << k;
  }
  crashed.clear();  // Fenced: their closes land nothing.
  EXPECT_EQ(*live->Get("crashed3-1"), Value(1, 1));
  live.reset();
  fresh.reset();
  ExpectPoolSound(*env_);
}

// A writer fenced after the census scanned, before it said what it took
// since its holdings: a block of a chunk it reserved between its holdings
// and the scan, linked after the scan, is one nothing the scan saw names.
// The round scans anew once the writer is fenced on every copy, and keeps
// the block out of the pool.
TEST_P(HeapReclaimTest, AWriterFencedBeforeItsLastReportIsScannedAnew) {
  ManualClock clock;
  auto live = Open(clock);
  auto writer = Open(clock);
  auto idle = Open(clock);
  ASSERT_TRUE(live && writer && idle);
  ASSERT_TRUE(idle->Put("idle", Value(0, 0)).ok());
  int keys = 0;
  const auto write = [&](int n) {
    for (int i = 0; i < n; ++i, ++keys) {
      ASSERT_TRUE(writer->Put(absl::StrCat("w", keys), Value(keys, 0)).ok()) << keys;
    }
  };
  // The idle client's lease lapses: a round starts, asking for holdings.
  bool started = false;
  for (int s = 0; s < 16 && !started; ++s) {
    clock.Advance(kLease / 4);
    ASSERT_TRUE(live->Put("live", Value(s, 0)).ok());
    write(1);
    started = !env_->server->CheckLeases(clock.now()).empty();
    for (const auto& b : env_->backups) b->CheckLeases(clock.now());
  }
  ASSERT_TRUE(started);
  // Both report at their next renewal; the writer then writes more than a
  // chunk holds (a chunk is a 32nd of the heap), and the server scans.
  clock.Advance(kLease / 4);
  ASSERT_TRUE(live->Put("live", Value(1, 1)).ok());
  write(40);
  ASSERT_TRUE(live->Put("live", Value(1, 2)).ok());
  CheckLeases(clock.now());
  // After the scan, before the writer renews (its clock stands): a block
  // of its new chunk linked. Then it is never heard from again.
  const std::string last = absl::StrCat("w", keys);
  write(1);
  for (int s = 0; s < 64 && env_->server->Stats().heap_reclaimed == 0; ++s) {
    clock.Advance(kLease / 8);
    ASSERT_TRUE(live->Put("live", Value(s, 3)).ok());
    CheckLeases(clock.now());
  }
  EXPECT_EQ(env_->server->Stats().sessions_fenced, 2u);
  EXPECT_GT(env_->server->Stats().heap_reclaimed, 0u);
  // What came back serves a new writer, and no block of the writer's was
  // handed out twice.
  auto fresh = Open(clock);
  ASSERT_NE(fresh, nullptr);
  for (int k = 0; k < 100; ++k) {
    ASSERT_TRUE(fresh->Put(absl::StrCat("fresh", k), Value(k, 2)).ok()) << k;
  }
  for (int k = 0; k < keys; ++k) {
    auto v = live->Get(absl::StrCat("w", k));
    ASSERT_TRUE(v.ok()) << k << ": " << v.status();
    EXPECT_EQ(*v, Value(k, 0)) << k;
  }
  EXPECT_EQ(*live->Get(last), Value(keys - 1, 0));
  writer.reset();
  idle.reset();
  live.reset();
  fresh.reset();
  ExpectPoolSound(*env_);
}

// A replicated region: the primary takes nothing back while a backup
// still lets the crashed session in, and nothing a backup's slot names,
// though no slot of the primary's does (a failed write's tentative word,
// which a takeover would make the key's).
class ReplicatedHeapReclaimTest : public HeapReclaimTest {};

TEST_P(ReplicatedHeapReclaimTest, WaitsForEveryCopysFenceAndKeepsWhatABackupNames) {
  ManualClock clock;
  auto crashed = Open(clock);
  ASSERT_NE(crashed, nullptr);
  ASSERT_TRUE(crashed->Put("k", Value(0, 0)).ok());
  // Past its block, the rest of its chunk: a word on the last backup
  // names a block there.
  const layout::Layout& l = env_->server->layout();
  uint64_t named = 0;
  layout::ForEachSlot(l, [&](uint64_t offset) {
    uint64_t word;
    std::memcpy(&word, env_->server->MemoryForTesting() + offset, 8);
    if (word != 0) named = word;
  });
  ASSERT_NE(named, 0u);
  layout::Slot stray = layout::Slot::Decode(named);
  const uint64_t bytes = layout::ClassBytes(stray.size_class);
  stray.offset += bytes;
  uint8_t* const backup = env_->backups.back()->MemoryForTesting();
  bool staged = false;
  layout::ForEachSlot(l, [&](uint64_t offset) {
    uint64_t word;
    std::memcpy(&word, backup + offset, 8);
    if (word != 0 || staged) return;
    word = stray.Encode();
    std::memcpy(backup + offset, &word, 8);
    staged = true;
  });
  // Two leases of checks by the primary alone: it fences the session,
  // and takes nothing back while the backups still hold it.
  for (int s = 0; s < 16; ++s) {
    clock.Advance(kLease / 8);
    env_->server->CheckLeases(clock.now());
  }
  EXPECT_EQ(env_->server->Stats().sessions_fenced, 1u);
  EXPECT_EQ(env_->server->Stats().heap_reclaimed, 0u);
  // The backups, checking from now on, fence it a lease later.
  for (int s = 0; s < 64 && env_->server->Stats().heap_reclaimed == 0; ++s) {
    clock.Advance(kLease / 8);
    CheckLeases(clock.now());
  }
  EXPECT_GT(env_->server->Stats().heap_reclaimed, 0u);
  bool whole = false;
  const std::vector<Pooled> pooled = PooledBlocks(env_->server->MemoryForTesting(), l, &whole);
  ASSERT_TRUE(whole);
  EXPECT_FALSE(Overlaps(pooled, stray.offset, bytes)) << "the block a backup names was pooled";
  EXPECT_TRUE(Overlaps(pooled, stray.offset + bytes, bytes)) << "the rest of the chunk was not";
  crashed.reset();
  ExpectPoolSound(*env_);
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return absl::StrCat(KvBackendName(std::get<0>(info.param)), "_",
                      std::get<1>(info.param) == 1 ? "one_copy" : "three_copies");
}

INSTANTIATE_TEST_SUITE_P(Backends, HeapReclaimTest,
                         ::testing::Combine(::testing::Values(KvBackend::kSoftTcp,
                                                              KvBackend::kSoftSim),
                                            ::testing::Values(1, 3)),
                         ParamName);
// On rxe, in an emulated guest, three copies of it take minutes: one there.
INSTANTIATE_TEST_SUITE_P(Verbs, HeapReclaimTest,
                         ::testing::Combine(::testing::Values(KvBackend::kVerbs),
                                            ::testing::Values(1)),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(Backends, ReplicatedHeapReclaimTest,
                         ::testing::Combine(::testing::Values(KvBackend::kSoftTcp,
                                                              KvBackend::kSoftSim,
                                                              KvBackend::kVerbs),
                                            ::testing::Values(3)),
                         ParamName);

}  // namespace
}  // namespace rkv::testing
