// A region kept in mirrored copies (client/protocol/replica_sync.h): what a client
// writes reaches every copy, slot for slot and block for block, and an
// intent a writer left behind (it died between the copies) is finished by
// the next operation on its key.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fabric/faulty_fabric.h"
#include "common/layout/region_format.h"
#include "common/random.h"
#include "gtest/gtest.h"
#include "tests/client/region/kv_test_env.h"

namespace rkv::testing {
namespace {

uint64_t LoadWord(const uint8_t* memory, uint64_t offset) {
  return std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(memory + offset))
      .load(std::memory_order_relaxed);
}

void StoreWord(uint8_t* memory, uint64_t offset, uint64_t word) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(memory + offset))
      .store(word, std::memory_order_relaxed);
}

struct Param {
  KvBackend backend;
  int replicas;
};

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return absl::StrCat(KvBackendName(info.param.backend), "_r", info.param.replicas);
}

// Runs `ops` random operations on keys k0..k<keys - 1> over `clients`, at
// most 4 in flight each, until every callback has run; `check` sees each
// status.
void RandomOps(const std::vector<std::unique_ptr<Client>>& clients, int ops, int keys,
               uint64_t seed, const std::function<void(const absl::Status&)>& check) {
  Rng rng(seed);
  int issued = 0, done = 0;
  auto count = [&](const absl::Status& s) {
    check(s);
    done++;
  };
  while (done < ops) {
    for (const auto& c : clients) {
      while (issued < ops && c->in_flight() < 4) {
        const std::string key = absl::StrCat("k", rng.Uniform(keys));
        const std::string value = absl::StrCat("v", issued++);
        switch (rng.Uniform(4)) {
          case 0:
            c->GetAsync(key, [&](absl::StatusOr<std::string> v) { count(v.status()); });
            break;
          case 1:
            c->PutAsync(key, value, count);
            break;
          case 2:
            c->InsertAsync(key, value, count);
            break;
          default:
            c->DeleteAsync(key, count);
        }
      }
      c->Poll(absl::ZeroDuration());
    }
  }
}

class ReplicatedClientTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    auto env =
        KvTestEnv::Create(GetParam().backend, {.region_bytes = 4 << 20}, 1, GetParam().replicas);
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = std::move(env).value();
    ASSERT_EQ(env_->backups.size(), size_t(GetParam().replicas - 1));
  }

  std::vector<const uint8_t*> Copies() const {
    std::vector<const uint8_t*> copies = {env_->server->MemoryForTesting()};
    for (const auto& b : env_->backups) copies.push_back(b->MemoryForTesting());
    return copies;
  }

  // With nothing in flight, every copy holds the primary's committed words
  // in the same slots, and the same bytes in the blocks they name; where
  // the primary's slot holds no committed word, a backup's holds nothing
  // or a tombstone. The primary holds no intent. Returns the committed
  // slots.
  // With `allow_failed_writes`, a backup may instead hold, where the
  // primary holds a committed word, a failed update's or delete's word of
  // the same key (see ReplicatedUnderFaultsTest).
  int ExpectMirrors(bool allow_failed_writes = false) const {
    const std::vector<const uint8_t*> copies = Copies();
    const layout::Layout& l = env_->server->layout();
    int committed = 0;
    layout::ForEachSlot(l, [&](uint64_t offset) {
      const uint64_t word = LoadWord(copies[0], offset);
      EXPECT_FALSE(layout::IsIntent(word)) << "an intent left at slot " << offset;
      if (layout::IsCommitted(word)) committed++;
      for (size_t r = 1; r < copies.size(); ++r) {
        const uint64_t backup = LoadWord(copies[r], offset);
        if (layout::IsCommitted(word)) {
          if (allow_failed_writes && backup != word) {
            EXPECT_TRUE(
                backup == layout::DeleteIntentOf(word) ||
                (layout::IsCommitted(backup) && KeyOf(copies[r], backup) == KeyOf(copies[0], word)))
                << "slot " << offset << " of copy " << r << " holds " << backup;
            continue;
          }
          EXPECT_EQ(backup, word) << "slot " << offset << " of copy " << r;
        } else {
          EXPECT_TRUE(backup == 0 || layout::IsTombstone(backup))
              << "slot " << offset << " of copy " << r << " holds " << backup
              << " where the primary's holds " << word;
        }
      }
      if (!layout::IsCommitted(word)) return;
      const layout::Slot s = layout::Slot::Decode(word);
      const uint64_t bytes = layout::ClassBytes(s.size_class);
      for (size_t r = 1; r < copies.size(); ++r) {
        if (allow_failed_writes && LoadWord(copies[r], offset) != word) continue;
        EXPECT_EQ(std::memcmp(copies[0] + s.offset, copies[r] + s.offset, bytes), 0)
            << "block at " << s.offset << " of copy " << r;
      }
    });
    return committed;
  }

  // The key in the block `word` names in `memory` ("" if none intact).
  static std::string KeyOf(const uint8_t* memory, uint64_t word) {
    const layout::Slot s = layout::Slot::Decode(word);
    absl::StatusOr<layout::BlockView> b =
        layout::DecodeBlock(absl::string_view(reinterpret_cast<const char*>(memory + s.offset),
                                              layout::ClassBytes(s.size_class)),
                            layout::BlockCheck::kChecksum);
    return b.ok() ? std::string(b->key) : "";
  }

  // The slot of `key`'s committed word on the primary (0 if none).
  uint64_t SlotOf(absl::string_view key) const {
    const uint8_t* primary = env_->server->MemoryForTesting();
    uint64_t found = 0;
    layout::ForEachSlot(env_->server->layout(), [&](uint64_t offset) {
      const uint64_t word = LoadWord(primary, offset);
      if (!layout::IsCommitted(word)) return;
      const layout::Slot s = layout::Slot::Decode(word);
      absl::StatusOr<layout::BlockView> b =
          layout::DecodeBlock(absl::string_view(reinterpret_cast<const char*>(primary + s.offset),
                                                layout::ClassBytes(s.size_class)),
                              layout::BlockCheck::kChecksum);
      if (b.ok() && b->key == key) found = offset;
    });
    return found;
  }

  std::unique_ptr<KvTestEnv> env_;
};

TEST_P(ReplicatedClientTest, EveryOperationReachesEveryCopy) {
  auto c = env_->NewClient();
  ASSERT_TRUE(c.ok()) << c.status();
  Client& client = **c;
  EXPECT_TRUE(absl::IsNotFound(client.Get("k").status()));
  ASSERT_TRUE(client.Insert("k", "v1").ok());
  EXPECT_TRUE(absl::IsAlreadyExists(client.Insert("k", "v0")));
  EXPECT_EQ(*client.Get("k"), "v1");
  ASSERT_TRUE(client.Put("k", "v2").ok());
  EXPECT_EQ(*client.Get("k"), "v2");
  ASSERT_TRUE(client.Put("gone", "x").ok());
  ASSERT_TRUE(client.Delete("gone").ok());
  EXPECT_TRUE(absl::IsNotFound(client.Get("gone").status()));
  EXPECT_TRUE(absl::IsNotFound(client.Delete("gone")));
  EXPECT_EQ(ExpectMirrors(), 1);
}

TEST_P(ReplicatedClientTest, ClientsRacingOnFewKeysLeaveIdenticalCopies) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) {
    auto c = env_->NewClient();
    ASSERT_TRUE(c.ok()) << c.status();
    clients.push_back(std::move(c).value());
  }
  RandomOps(clients, 600, 6, 7, [](const absl::Status& s) {
    EXPECT_TRUE(s.ok() || absl::IsNotFound(s) || absl::IsAlreadyExists(s)) << s;
  });
  // Callbacks have run; commits sent without waiting may still be out.
  for (auto& c : clients) {
    while (c->in_flight() > 0) c->Poll(absl::Milliseconds(1));
  }
  EXPECT_GT(ExpectMirrors(), 0);
}

// A writer that set its intent on the primary and died before writing
// anything to the backups, not even its block: the next reader copies
// the block over, brings the backups along and commits.
TEST_P(ReplicatedClientTest, AnIntentLeftBehindIsFinishedByTheNextOperation) {
  auto c = env_->NewClient();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->Put("k", "old").ok());
  ASSERT_TRUE((*c)->Put("d", "doomed").ok());
  const uint64_t slot = SlotOf("k");
  ASSERT_NE(slot, 0u);
  uint8_t* primary = env_->server->MemoryForTesting();
  const uint64_t old_word = LoadWord(primary, slot);
  // The dead writer's block, on the primary only, at the heap's far end.
  std::string block;
  layout::EncodeBlock("k", "new", &block);
  const layout::Layout& l = env_->server->layout();
  const uint64_t at = (l.heap_offset + l.heap_bytes - block.size()) / 64 * 64;
  std::memcpy(primary + at, block.data(), block.size());
  const layout::Slot old = layout::Slot::Decode(old_word);
  const uint64_t new_word =
      layout::Slot{old.fingerprint, layout::ClassFor(block.size()), at, false}.Encode();
  StoreWord(primary, slot, layout::IntentOf(new_word));
  // And a deleter that died the same way.
  const uint64_t d_slot = SlotOf("d");
  ASSERT_NE(d_slot, 0u);
  StoreWord(primary, d_slot, layout::DeleteIntentOf(LoadWord(primary, d_slot)));

  auto fresh = env_->NewClient();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*(*fresh)->Get("k"), "new");
  EXPECT_TRUE(absl::IsNotFound((*fresh)->Get("d").status()));
  EXPECT_EQ(LoadWord(primary, slot), new_word);
  EXPECT_EQ(LoadWord(primary, d_slot), 0u);
  EXPECT_EQ(ExpectMirrors(), 1);
  // The writer's own client, with the old word cached, learns it changed.
  EXPECT_EQ(*(*c)->Get("k"), "new");
}

// Writers whose requests fail, are delayed or whose connections drop
// leave intents half copied, tentative words on backups and claims behind.
// Once every key has been read by a client without faults (and whatever
// the failed ones still had on the wire has run), no intent is left, and
// a backup's slot differs from the primary's only by a failed write of
// the same key (a tentative word whose intent never landed: it may take
// effect should that backup take over, as a write of unknown outcome may).
// The next write of each key brings every copy back to the primary's.
// In the simulation only: its clock times the injected delays, so a seed
// replays.
using ReplicatedUnderFaultsTest = ReplicatedClientTest;
TEST_P(ReplicatedUnderFaultsTest, CopiesAgreeAfterFaultsOnceEachKeyIsRead) {
  constexpr int kKeys = 6;
  const char* more = std::getenv("RKV_REPLICA_SEEDS");
  const uint64_t seeds = more != nullptr ? std::strtoull(more, nullptr, 10) : 20;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    SetUp();  // A fresh set of copies per seed.
    fabric::FaultOptions faults;
    faults.delay_probability = 0.05;
    faults.max_delay = absl::Microseconds(300);
    faults.fail_probability = 0.02;
    faults.drop_probability = 0.005;
    std::vector<std::unique_ptr<Client>> clients;
    for (int i = 0; i < 3; ++i) {
      client_internal::OpenOptions o = env_->client_options();
      faults.seed = seed * 7 + i;
      // Delays in simulated time, which also ticks as the client polls.
      auto clock = [net = env_->sim, ticks = std::make_shared<int64_t>(0)] {
        return absl::UnixEpoch() + absl::Microseconds(net->steps() + (*ticks)++);
      };
      // Opening reads the region headers, which a fault may fail too.
      absl::StatusOr<std::unique_ptr<Client>> c = absl::UnknownError("not opened");
      for (int attempt = 0; !c.ok() && attempt < 20; ++attempt) {
        faults.seed += 1000;
        o.fabric = fabric::InjectFaults(env_->sim->NewFabric(), faults, clock);
        c = env_->NewClient(o);
      }
      ASSERT_TRUE(c.ok()) << c.status();
      clients.push_back(std::move(c).value());
    }
    RandomOps(clients, 300, kKeys, seed, [](const absl::Status&) {});
    clients.clear();
    env_->sim->RunUntilIdle();
    auto clean = env_->NewClient();
    ASSERT_TRUE(clean.ok()) << clean.status();
    for (int k = 0; k < kKeys; ++k) {
      absl::StatusOr<std::string> v = (*clean)->Get(absl::StrCat("k", k));
      EXPECT_TRUE(v.ok() || absl::IsNotFound(v.status())) << v.status();
    }
    ExpectMirrors(/*allow_failed_writes=*/true);
    for (int k = 0; k < kKeys; ++k) ASSERT_TRUE((*clean)->Put(absl::StrCat("k", k), "last").ok());
    ExpectMirrors();
    if (HasFailure()) {
      ADD_FAILURE() << "seed " << seed;
      return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Copies, ReplicatedUnderFaultsTest,
                         ::testing::Values(Param{KvBackend::kSoftSim, 2},
                                           Param{KvBackend::kSoftSim, 3}),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(Copies, ReplicatedClientTest,
                         ::testing::Values(Param{KvBackend::kSoftSim, 2},
                                           Param{KvBackend::kSoftSim, 3},
                                           Param{KvBackend::kSoftTcp, 2},
                                           Param{KvBackend::kSoftTcp, 3}),
                         ParamName);

}  // namespace
}  // namespace rkv::testing
