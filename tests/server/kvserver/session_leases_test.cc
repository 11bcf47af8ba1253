// Client sessions and their leases (server/kvserver/session_leases.h,
// client/region/session_lease.h): a session whose lease lapsed is fenced,
// so that a client paused past it can write nothing any more; the client
// then goes on as a new session. The server's checks and the client's
// clock are driven by hand here, as a pause would leave them.
#include "server/kvserver/session_leases.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/layout/region_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/kvserver/region_server.h"
#include "tests/client/region/kv_test_env.h"
#include "tests/client/region/manual_clock.h"
#include "tests/common/fabric/fabric_test_env.h"

namespace rkv::testing {
namespace {

constexpr absl::Duration kLease = absl::Seconds(2);

class SessionLeasesTest : public ::testing::TestWithParam<KvBackend> {
 protected:
  void SetUp() override {
    auto env = KvTestEnv::Create(GetParam(), {.region_bytes = 4 << 20,
                                              .client_lease = kLease,
                                              .session_slots = 3,
                                              .lease_thread = false});
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = std::move(env).value();
  }

  std::unique_ptr<client_internal::RegionClient> Open(const ManualClock& clock) {
    return OpenOn(*env_, clock);
  }

  std::unique_ptr<KvTestEnv> env_;
};

TEST_P(SessionLeasesTest, ASessionHoldsAnEntryUntilItCloses) {
  ManualClock clock;
  {
    auto c = Open(clock);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->Put("k", "v").ok());
    env_->server->CheckLeases(clock.now());
    EXPECT_EQ(env_->server->Stats().sessions, 1u);
  }
  env_->server->CheckLeases(clock.now());
  const server::RegionStats st = env_->server->Stats();
  EXPECT_EQ(st.sessions, 0u);
  EXPECT_EQ(st.sessions_fenced, 0u);  // It left; nobody was fenced.
}

TEST_P(SessionLeasesTest, RenewalsKeepAPollingClientsLease) {
  ManualClock clock;
  auto c = Open(clock);
  ASSERT_NE(c, nullptr);
  absl::Time server_time = clock.now();
  // Ten leases of steady work, the server checking every eighth of one.
  for (int i = 0; i < 80; ++i) {
    clock.Advance(kLease / 8);
    server_time += kLease / 8;
    ASSERT_TRUE(c->Put("k", std::to_string(i)).ok()) << i;
    EXPECT_TRUE(env_->server->CheckLeases(server_time).empty()) << i;
  }
  EXPECT_EQ(env_->server->Stats().sessions_fenced, 0u);
  EXPECT_EQ(*c->Get("k"), "79");
}

TEST_P(SessionLeasesTest, AClientPausedPastItsLeaseIsFencedAndItsLateWritesAreRefused) {
  ManualClock paused_clock, other_clock;
  auto paused = Open(paused_clock);
  auto other = Open(other_clock);
  ASSERT_NE(paused, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(paused->Put("k", "before").ok());
  // The paused client renews nothing; the other one keeps working.
  absl::Time server_time = other_clock.now();
  EXPECT_TRUE(env_->server->CheckLeases(server_time).empty());
  for (absl::Duration d; d <= kLease; d += kLease / 8) {
    other_clock.Advance(kLease / 8);
    server_time += kLease / 8;
    ASSERT_TRUE(other->Put("o", "x").ok());
    env_->server->CheckLeases(server_time);
  }
  server::RegionStats st = env_->server->Stats();
  EXPECT_EQ(st.sessions_fenced, 1u);
  EXPECT_EQ(st.sessions, 1u);
  // Resumed, with no sense of the time that passed (its clock stood
  // still), the client writes: the write is refused, outcome unknown to it
  // (Unavailable), and the value stays as it was.
  const absl::Status late = paused->Put("k", "late");
  EXPECT_TRUE(absl::IsUnavailable(late)) << late;
  EXPECT_EQ(*other->Get("k"), "before");
  // Its next operation runs as a new session, with a lease of its own.
  ASSERT_TRUE(paused->Put("k", "after").ok());
  EXPECT_EQ(*other->Get("k"), "after");
  env_->server->CheckLeases(server_time);
  st = env_->server->Stats();
  EXPECT_EQ(st.sessions, 2u);
  EXPECT_EQ(st.sessions_fenced, 1u);
}

TEST_P(SessionLeasesTest, AnIdleClientRenewsBeforeItPostsAndKeepsItsSession) {
  ManualClock clock;
  auto c = Open(clock);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Put("k", "v").ok());
  // The server checks every eighth of a lease throughout.
  const absl::Time start = clock.now();
  absl::Time server_time = start;
  const auto check_until = [&](absl::Duration since_start) {
    for (; server_time <= start + since_start; server_time += kLease / 8) {
      env_->server->CheckLeases(server_time);
    }
  };
  // Idle for three quarters of a lease: its lease is in doubt, so it
  // renews before it posts, and the server sees the renewal.
  check_until(kLease * 3 / 4);
  clock.Advance(kLease * 3 / 4);
  ASSERT_TRUE(c->Put("k", "w").ok());
  // Idle again, for less than a lease since that renewal: still its own.
  check_until(kLease * 3 / 2);
  server::RegionStats st = env_->server->Stats();
  EXPECT_EQ(st.sessions, 1u);
  EXPECT_EQ(st.sessions_fenced, 0u);
  // A whole lease without a renewal: fenced.
  check_until(kLease * 2);
  EXPECT_EQ(env_->server->Stats().sessions_fenced, 1u);
}

// The blocking round trips of a close (handing blocks back, emptying the
// entry) must not take a renewal's completion for theirs.
TEST_P(SessionLeasesTest, AClientClosingWithARenewalInFlightHandsBackAllItHeld) {
  ManualClock clock;
  // Twice: the second close pushes onto a pool the first filled, so that a
  // push that took another round's completion for its CAS's would believe
  // a CAS that failed (the pool's head is no longer empty) and lose blocks.
  for (int round = 0; round < 2; ++round) {
    auto c = Open(clock);
    ASSERT_NE(c, nullptr);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(c->Put(absl::StrCat("k", round, i), "a").ok());
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(c->Put(absl::StrCat("k", round, i), "b").ok());
    clock.Advance(kLease / 4);  // A renewal is due: the next poll posts it.
    c->Poll(absl::ZeroDuration());
  }
  env_->server->CheckLeases(clock.now());
  const server::RegionStats st = env_->server->Stats();
  EXPECT_EQ(st.sessions, 0u);
  EXPECT_EQ(st.heap_used - st.heap_live - st.heap_pooled, 0u) << "heap held after a close";
  EXPECT_FALSE(st.heap_pool_partial);
  // The pool serves: another client reuses what the first handed back.
  auto d = Open(clock);
  ASSERT_NE(d, nullptr);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(d->Put(absl::StrCat("k0", i), "c").ok());
  EXPECT_EQ(*d->Get("k07"), "c");
  EXPECT_EQ(*d->Get("k17"), "b");
}

TEST_P(SessionLeasesTest, AServerThatStoppedWatchingFencesNobodyAtOnce) {
  ManualClock clock;
  auto c = Open(clock);
  ASSERT_NE(c, nullptr);
  absl::Time t = clock.now();
  env_->server->CheckLeases(t);
  // The server was paused for two leases (the client too, say): its next
  // check starts every lease anew instead of fencing.
  t += 2 * kLease;
  EXPECT_TRUE(env_->server->CheckLeases(t).empty());
  // Watched for a whole lease without a renewal, the session goes.
  for (int i = 0; i < 8; ++i) {
    t += kLease / 8;
    env_->server->CheckLeases(t);
  }
  EXPECT_EQ(env_->server->Stats().sessions_fenced, 1u);
}

TEST_P(SessionLeasesTest, AFullTableRefusesANewSessionWithAClearError) {
  ManualClock clock;
  auto a = Open(clock);
  auto b = Open(clock);
  auto c = Open(clock);
  ASSERT_NE(c, nullptr);
  client_internal::OpenOptions o = env_->client_options();
  auto d = env_->NewClient(o);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(d.status())) << d.status();
  EXPECT_NE(d.status().message().find("--session_slots"), std::string::npos) << d.status();
  // One closes: there is room again.
  b.reset();
  EXPECT_TRUE(env_->NewClient(o).ok());
}

// A client process that exits closes its connections: the server fences
// its session at the next check instead of waiting out the lease (so the
// heap census can take its heap back soon); a session whose queue pair is
// still open keeps its entry.
TEST_P(SessionLeasesTest, ASessionWhoseConnectionsClosedIsFencedAtTheNextCheck) {
  auto net = fabric::testing::FabricTestEnv::Create(GetParam() == KvBackend::kSoftTcp
                                                        ? fabric::testing::Backend::kSoftTcp
                                                        : fabric::testing::Backend::kSoftSim);
  ASSERT_TRUE(net.ok()) << net.status();
  fabric::testing::FabricTestEnv& fabric_env = **net;
  auto leases = server::SessionLeases::Create(*fabric_env.target, 4, kLease, 0);
  ASSERT_TRUE(leases.ok()) << leases.status();
  constexpr uint64_t kCrashed = 0xC0FFEE, kLive = 0xBEEF;
  auto crashed = fabric_env.ConnectAs(kCrashed);
  auto live = fabric_env.ConnectAs(kLive);
  ASSERT_TRUE(crashed.ok() && live.ok());
  uint8_t* buf = fabric_env.local_mem->data();
  for (fabric::QueuePair* qp : {crashed->get(), live->get()}) {
    ASSERT_EQ(fabric_env.Run(*qp, {fabric_env.Read(1, 0, buf, 8)}, 1).size(), 1u);
  }
  // Their entries, as their claims left them.
  auto owner = [&](uint32_t slot) {
    return std::atomic_ref<uint64_t>(
        (*leases)->WordsForTesting()[layout::SessionOwnerOffset(slot) / 8]);
  };
  owner(0).store(kCrashed);
  owner(1).store(kLive);
  const absl::Time t = absl::Now();  // The server's clock stands: no lease lapses.
  EXPECT_TRUE((*leases)->Check(t, *fabric_env.listener).empty());

  crashed->reset();
  std::vector<uint64_t> fenced;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       fenced.empty() && absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(5))) {
    fenced = (*leases)->Check(t, *fabric_env.listener);
  }
  EXPECT_THAT(fenced, ::testing::ElementsAre(kCrashed));
  EXPECT_EQ(owner(0).load(), 0u);
  EXPECT_EQ(owner(1).load(), kLive);
  EXPECT_EQ((*leases)->live(), 1u);
  // Fenced for good: the id is refused a new connection.
  EXPECT_TRUE(absl::IsFailedPrecondition(fabric_env.ConnectAs(kCrashed).status()));
}

INSTANTIATE_TEST_SUITE_P(Backends, SessionLeasesTest,
                         ::testing::Values(KvBackend::kSoftTcp, KvBackend::kSoftSim),
                         [](const auto& info) { return KvBackendName(info.param); });

}  // namespace
}  // namespace rkv::testing
