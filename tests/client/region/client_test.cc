// Functional tests of the client's operations, on the soft fabric over TCP,
// in the deterministic simulation, and over verbs where it can run.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/region/kv_test_env.h"
#include "tests/common/fabric/verbs_test_setup.h"

namespace rkv::testing {
namespace {

class ClientTest : public ::testing::TestWithParam<KvBackend> {
 protected:
  void SetUp() override { Reset({}); }

  void Reset(const server::RegionServerOptions& so) {
    client_.reset();
    env_.reset();
    auto env = KvTestEnv::Create(GetParam(), so);
    if (!env.ok()) RKV_SKIP_OR_FAIL(env.status());
    env_ = std::move(env).value();
    auto c = env_->NewClient();
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(c).value();
  }

  std::unique_ptr<KvTestEnv> env_;
  std::unique_ptr<client_internal::RegionClient> client_;
};

TEST_P(ClientTest, PutGetDeleteRoundTrip) {
  EXPECT_TRUE(absl::IsNotFound(client_->Get("k").status()));
  ASSERT_TRUE(client_->Put("k", "v1").ok());
  EXPECT_EQ(*client_->Get("k"), "v1");
  ASSERT_TRUE(client_->Put("k", "v2").ok());
  EXPECT_EQ(*client_->Get("k"), "v2");
  ASSERT_TRUE(client_->Delete("k").ok());
  EXPECT_TRUE(absl::IsNotFound(client_->Get("k").status()));
  EXPECT_TRUE(absl::IsNotFound(client_->Delete("k")));
}

TEST_P(ClientTest, InsertFailsWhenPresent) {
  ASSERT_TRUE(client_->Insert("k", "first").ok());
  absl::Status again = client_->Insert("k", "second");
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_EQ(*client_->Get("k"), "first");
  ASSERT_TRUE(client_->Delete("k").ok());
  EXPECT_TRUE(client_->Insert("k", "third").ok());
  EXPECT_EQ(*client_->Get("k"), "third");
}

TEST_P(ClientTest, EveryValueSizeUpToOneMebibyte) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{47}, size_t{48}, size_t{49}, size_t{4000},
                      size_t{65536}, size_t{300000}, size_t{1} << 20}) {
    SCOPED_TRACE(size);
    std::string value(size, '\0');
    for (size_t i = 0; i < size; ++i) value[i] = static_cast<char>('a' + (i * 7 + size) % 26);
    const std::string key = "key-" + std::to_string(size);
    ASSERT_TRUE(client_->Put(key, value).ok());
    auto got = client_->Get(key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, value);
  }
}

TEST_P(ClientTest, KeyAndValueLimits) {
  const std::string max_key(1024, 'k');
  ASSERT_TRUE(client_->Put(max_key, "v").ok());
  EXPECT_EQ(*client_->Get(max_key), "v");
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Put(std::string(1025, 'k'), "v")));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Put("", "v")));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Get(std::string(1025, 'k')).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Put("k", std::string((1 << 20) + 1, 'v'))));
}

TEST_P(ClientTest, ClientsSeeEachOthersWrites) {
  auto other = env_->NewClient();
  ASSERT_TRUE(other.ok());
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(client_->Put("k" + std::to_string(i), "a" + std::to_string(i)).ok());
  }
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(*(*other)->Get("k" + std::to_string(i)), "a" + std::to_string(i));
  }
  // Overwrites and deletes by one are seen by the other, cache or not.
  for (int i = 0; i < 50; ++i) {
    if (i % 2) {
      ASSERT_TRUE((*other)->Put("k" + std::to_string(i), "b").ok());
    } else {
      ASSERT_TRUE((*other)->Delete("k" + std::to_string(i)).ok());
    }
  }
  for (int i = 0; i < 50; ++i) {
    auto v = client_->Get("k" + std::to_string(i));
    if (i % 2) {
      EXPECT_EQ(*v, "b");
    } else {
      EXPECT_TRUE(absl::IsNotFound(v.status()));
    }
  }
}

TEST_P(ClientTest, CachedGetTakesOneRoundTrip) {
  ASSERT_TRUE(client_->Put("k", "v").ok());
  auto fresh = env_->NewClient();
  ASSERT_TRUE(fresh.ok());
  ASSERT_EQ(*(*fresh)->Get("k"), "v");
  EXPECT_EQ((*fresh)->costs(OpType::kGet).round_trips, 2u);  // Buckets, then block.
  ASSERT_EQ(*(*fresh)->Get("k"), "v");
  EXPECT_EQ((*fresh)->costs(OpType::kGet).round_trips, 3u);  // Slot and block together.
}

TEST_P(ClientTest, AsyncOperationsShareDoorbells) {
  constexpr int kOps = 200;
  int done = 0;
  for (int i = 0; i < kOps; ++i) {
    client_->PutAsync("k" + std::to_string(i), "v" + std::to_string(i), [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      done++;
    });
  }
  while (client_->in_flight() > 0) client_->Poll(absl::Seconds(1));
  EXPECT_EQ(done, kOps);
  int found = 0;
  for (int i = 0; i < kOps; ++i) {
    client_->GetAsync("k" + std::to_string(i), [&, i](absl::StatusOr<std::string> v) {
      EXPECT_TRUE(v.ok()) << v.status();
      if (v.ok() && *v == "v" + std::to_string(i)) found++;
    });
  }
  while (client_->in_flight() > 0) client_->Poll(absl::Seconds(1));
  EXPECT_EQ(found, kOps);
  const OpCosts put = client_->costs(OpType::kPut);
  EXPECT_EQ(put.ops, uint64_t{kOps});
  EXPECT_EQ(client_->stats(OpType::kPut).outcomes[static_cast<int>(OpOutcome::kOk)],
            uint64_t{kOps});
  EXPECT_EQ(client_->stats(OpType::kGet).outcomes[static_cast<int>(OpOutcome::kOk)],
            uint64_t{kOps});
  const OpCosts get = client_->costs(OpType::kGet);
  // Each operation waited for its rounds, but rounds of different
  // operations went out under the same doorbells.
  EXPECT_GE(put.round_trips, 3u * kOps);
  const uint64_t doorbells = client_->connection_counters().doorbells;
  EXPECT_LT(doorbells * 3, (put.round_trips + get.round_trips) * 2)
      << doorbells << " doorbells for " << put.round_trips + get.round_trips << " rounds";
}

// Writes of one key in flight together run one at a time, in the order
// they were submitted: none loses a race to another and starts over, and
// the last one submitted is the value that stays. Other keys' writes run
// beside them.
TEST_P(ClientTest, WritesOfOneKeyRunOneAtATimeInOrder) {
  constexpr int kWrites = 32;
  std::vector<int> hot_done;
  int others_done = 0;
  for (int i = 0; i < kWrites; ++i) {
    client_->PutAsync("hot", "v" + std::to_string(i), [&, i](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      hot_done.push_back(i);
    });
    client_->PutAsync("k" + std::to_string(i), "v", [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      others_done++;
    });
  }
  while (client_->in_flight() > 0) client_->Poll(absl::Seconds(1));
  std::vector<int> in_order(kWrites);
  for (int i = 0; i < kWrites; ++i) in_order[i] = i;
  EXPECT_EQ(hot_done, in_order);
  EXPECT_EQ(others_done, kWrites);
  EXPECT_EQ(client_->costs(OpType::kPut).retries, 0u);
  EXPECT_EQ(*client_->Get("hot"), "v" + std::to_string(kWrites - 1));
}

// A server that went away makes operations Unavailable: first through the
// broken connection, then through the failed reconnection. Never NotFound,
// which would claim the key is absent.
TEST_P(ClientTest, UnreachableServerIsUnavailable) {
  ASSERT_TRUE(client_->Put("k", "v").ok());
  env_->server.reset();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> v = client_->Get("k");
    EXPECT_TRUE(absl::IsUnavailable(v.status())) << "attempt " << i << ": " << v.status();
  }
}

TEST_P(ClientTest, FullHeapIsResourceExhaustedAndLosesNothing) {
  Reset({.region_bytes = 2 << 20, .index_share = 0.5});
  const std::string value(20000, 'x');
  std::vector<std::string> stored;
  absl::Status s;
  for (int i = 0; i < 1000 && s.ok(); ++i) {
    const std::string key = "big" + std::to_string(i);
    s = client_->Put(key, value);
    if (s.ok()) stored.push_back(key);
  }
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_GT(stored.size(), 10u);
  for (const std::string& k : stored) EXPECT_EQ(*client_->Get(k), value) << k;
}

// Operations in flight together may each take a heap chunk: every chunk
// is used, so the heap holds nearly as many blocks as it has room for.
TEST_P(ClientTest, WritesInFlightTogetherUseTheWholeHeap) {
  Reset({.region_bytes = 4 << 20, .index_share = 0.25});
  const std::string value(1000, 'v');
  int stored = 0, exhausted = 0;
  for (int i = 0; i < 10000 && exhausted == 0; i += 64) {
    for (int k = i; k < i + 64; ++k) {
      client_->PutAsync("key" + std::to_string(k), value, [&](absl::Status s) {
        stored += s.ok();
        exhausted += absl::IsResourceExhausted(s);
      });
    }
    while (client_->in_flight() > 0) client_->Poll(absl::Milliseconds(1));
  }
  ASSERT_GT(exhausted, 0);
  const uint64_t room = env_->server->layout().heap_bytes /
                        layout::ClassBytes(layout::ClassFor(layout::BlockBytes(8, value.size())));
  EXPECT_GT(stored, room * 9 / 10) << "room for " << room;
}

INSTANTIATE_TEST_SUITE_P(Backends, ClientTest,
                         ::testing::Values(KvBackend::kSoftTcp, KvBackend::kSoftSim,
                                           KvBackend::kVerbs),
                         [](const auto& info) { return KvBackendName(info.param); });

}  // namespace
}  // namespace rkv::testing

namespace rkv::testing {
namespace {

// Blocks a client freed (and the rest of its heap chunk) go back to the
// region when it closes: client after client overwriting the same keys
// writes many times the heap and never runs out.
//
// Over TCP only: a closing client waits out the grace period of what it
// freed last, on the real clock; the simulation's clock is its step count
// and does not move while a client closes.
TEST(FreePoolTest, FreedBlocksOutliveTheClientThatFreedThem) {
  auto env = KvTestEnv::Create(
      KvBackend::kSoftTcp,
      {.region_bytes = 2 << 20, .index_share = 0.5, .grace_period = absl::Milliseconds(20)});
  ASSERT_TRUE(env.ok()) << env.status();
  KvTestEnv& env_ = **env;
  const int kKeys = 10;
  const int kRounds = 20;  // 20 x 10 x 20 KB: 4 MB through a 1 MB heap.
  client_internal::OpenOptions options = env_.client_options();
  for (int round = 0; round < kRounds; ++round) {
    auto c = env_.NewClient(options);
    ASSERT_TRUE(c.ok()) << c.status();
    for (int i = 0; i < kKeys; ++i) {
      const std::string value(20000, static_cast<char>('a' + round));
      const absl::Status s = (*c)->Put("key" + std::to_string(i), value);
      ASSERT_TRUE(s.ok()) << "round " << round << ": " << s;
    }
  }
  auto c = env_.NewClient();
  ASSERT_TRUE(c.ok());
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(*(*c)->Get("key" + std::to_string(i)), std::string(20000, 'a' + kRounds - 1));
  }
}

// Fill the index to the brim: inserts end with ResourceExhausted for want
// of a slot, and every key stored before that is still there.
TEST(IndexFullTest, InsertsEndWithResourceExhaustedAndNothingIsLost) {
  auto env = KvTestEnv::Create(KvBackend::kSoftSim, {.region_bytes = 4 << 20, .index_share = 0.02});
  ASSERT_TRUE(env.ok()) << env.status();
  auto client = (*env)->NewClient();
  ASSERT_TRUE(client.ok());
  const uint64_t slots = (*env)->server->layout().slots();
  std::vector<std::string> stored;
  absl::Status first_failure;
  size_t stored_at_first_failure = 0;
  int failures = 0;
  for (uint64_t i = 0; i < slots + 1000 && failures < 200; ++i) {
    const std::string key = "key" + std::to_string(i);
    absl::Status s = (*client)->Insert(key, "v" + std::to_string(i));
    if (s.ok()) {
      stored.push_back(key);
    } else {
      ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
      if (failures++ == 0) {
        first_failure = s;
        stored_at_first_failure = stored.size();
      }
    }
  }
  EXPECT_TRUE(absl::StrContains(first_failure.message(), "index full")) << first_failure;
  const double load = static_cast<double>(stored_at_first_failure) / slots;
  std::cout << stored_at_first_failure << " of " << slots
            << " slots in use at the first failed insert (" << load << "); " << stored.size()
            << " after 200 failures\n";
  EXPECT_GT(load, 0.85);
  for (size_t i = 0; i < stored.size(); ++i) {
    auto v = (*client)->Get(stored[i]);
    ASSERT_TRUE(v.ok()) << stored[i] << ": " << v.status();
    EXPECT_EQ(*v, "v" + stored[i].substr(3));
  }
  // Deleting makes room again.
  ASSERT_TRUE((*client)->Delete(stored[0]).ok());
  EXPECT_TRUE((*client)->Insert(stored[0], "again").ok());
}

}  // namespace
}  // namespace rkv::testing
