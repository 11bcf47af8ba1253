// The coordinators' leadership and state in etcd (EtcdStateStore), with a
// real three-member etcd: one coordinator leads at a time, a standby takes
// over from one that is lost or cut off, a deposed leader changes nothing,
// and no instant has two coordinators that may order changes.
#include "server/kvcoord/etcd_state_store.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "gtest/gtest.h"
#include "tests/server/kvcoord/etcd_cluster.h"

namespace rkv::server {
namespace {

using testing::EtcdCluster;

// The servers' lease the leadership is timed from (a takeover after 500 ms
// of silence): long enough that a loaded machine's pauses do not move the
// leadership where a case expects it to stay.
constexpr absl::Duration kLease = absl::Milliseconds(1500);
constexpr char kPrefix[] = "/rkv-test";

// What a coordinator is told, kept for the test to wait on.
class Recorder : public StateStore::Listener {
 public:
  void OnLead(const proto::ClusterMap& state) override {
    std::lock_guard<std::mutex> lock(mu_);
    leads_++;
    last_ = state;
    cv_.notify_all();
  }
  void OnFollow(const proto::ClusterMap& state) override {
    std::lock_guard<std::mutex> lock(mu_);
    // As the coordinator: a state older than the one it has is dropped.
    if (state.epoch() < last_.epoch()) return;
    follows_++;
    last_ = state;
    cv_.notify_all();
  }
  // Waits until the last state told has `epoch` (10 s at most).
  bool WaitForEpoch(uint64_t epoch) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return last_.epoch() == epoch; });
  }
  int leads() {
    std::lock_guard<std::mutex> lock(mu_);
    return leads_;
  }
  proto::ClusterMap last() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int leads_ = 0;
  int follows_ = 0;
  proto::ClusterMap last_;
};

struct Coordinator {
  Recorder recorder;
  std::unique_ptr<EtcdStateStore> store;

  bool Leads() const { return store->leadership().CanOrder(MonotonicNow()); }
};

class EtcdStateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = EtcdCluster::Start(3);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    etcd_ = *std::move(cluster);
  }

  std::unique_ptr<etcd::EtcdClient> Client(std::vector<std::string> endpoints = {}) {
    etcd::EtcdOptions o;
    o.endpoints = endpoints.empty() ? etcd_->endpoints() : std::move(endpoints);
    o.call_timeout = absl::Milliseconds(60);
    o.total_timeout = absl::Milliseconds(200);
    auto c = etcd::EtcdClient::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }

  std::unique_ptr<Coordinator> Start(const std::string& id, std::vector<std::string> endpoints = {},
                                     proto::ClusterMap import = {}) {
    auto c = std::make_unique<Coordinator>();
    EtcdStoreOptions o;
    o.prefix = kPrefix;
    o.id = id;
    o.address = "127.0.0.1:" + id;
    o.lease = kLease;
    o.import = std::move(import);
    c->store = std::make_unique<EtcdStateStore>(Client(std::move(endpoints)), std::move(o));
    EXPECT_TRUE(c->store->Start(c->recorder).ok());
    return c;
  }

  // Waits (10 s at most) until exactly one of `a`, `b` leads; that one.
  Coordinator* WaitForOneLeader(Coordinator& a, Coordinator& b) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      const bool a_leads = a.Leads();
      if (a_leads != b.Leads()) return a_leads ? &a : &b;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return nullptr;
  }
  static void WaitToLead(Coordinator& c) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!c.Leads() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  }

  static proto::ClusterMap State(uint64_t epoch, uint64_t term) {
    proto::ClusterMap m;
    m.set_epoch(epoch);
    m.set_term(term);
    m.set_replicas(3);
    return m;
  }

  std::unique_ptr<EtcdCluster> etcd_;
};

TEST_F(EtcdStateStoreTest, OneLeadsAndTheOtherFollowsItsChanges) {
  auto a = Start("a");
  auto b = Start("b");
  Coordinator* leader = WaitForOneLeader(*a, *b);
  ASSERT_NE(leader, nullptr) << "no single leader";
  Coordinator* standby = leader == a.get() ? b.get() : a.get();
  const uint64_t term = leader->store->leadership().term;
  EXPECT_EQ(term, 1u) << "the first leader of an empty etcd";
  ASSERT_TRUE(leader->store->Commit(State(5, term)).ok());
  EXPECT_TRUE(standby->recorder.WaitForEpoch(5)) << "the standby did not see the change";
  // A standby changes nothing.
  EXPECT_FALSE(standby->store->Commit(State(6, term)).ok());
  // Both stay as they are over several leadership refreshes.
  absl::SleepFor(kLease * 2);
  EXPECT_TRUE(leader->Leads());
  EXPECT_FALSE(standby->Leads());
  EXPECT_EQ(leader->recorder.leads(), 1);
}

TEST_F(EtcdStateStoreTest, AStoppedLeaderHandsOnAndTheTermGrows) {
  auto a = Start("a");
  auto b = Start("b");
  Coordinator* leader = WaitForOneLeader(*a, *b);
  ASSERT_NE(leader, nullptr);
  const uint64_t term = leader->store->leadership().term;
  ASSERT_TRUE(leader->store->Commit(State(3, term)).ok());
  std::unique_ptr<Coordinator>& gone = leader == a.get() ? a : b;
  std::unique_ptr<Coordinator>& next = leader == a.get() ? b : a;
  gone.reset();  // Stop: the leader key is deleted.
  WaitToLead(*next);
  ASSERT_TRUE(next->Leads());
  EXPECT_EQ(next->store->leadership().term, term + 1);
  // It leads from the state the other stored, under the next term.
  EXPECT_EQ(next->recorder.last().epoch(), 3u);
  EXPECT_EQ(next->recorder.last().term(), term + 1);
}

// The leader cut off from etcd (its one member paused) stops ordering
// before the standby, which reaches the other two, takes over; back, it
// finds itself deposed. At no instant may both order changes.
TEST_F(EtcdStateStoreTest, ALeaderCutOffStopsBeforeAStandbyTakesOver) {
  const std::vector<std::string> all = etcd_->endpoints();
  auto a = Start("a", {all[0]});
  // Let `a` lead first: b starts once it does.
  WaitToLead(*a);
  ASSERT_TRUE(a->Leads());
  auto b = Start("b", {all[1], all[2]});
  absl::SleepFor(kLease);
  ASSERT_TRUE(a->Leads());
  ASSERT_FALSE(b->Leads());
  etcd_->Stop(0);
  bool both = false;
  Leadership la, lb;
  const absl::Time until = absl::Now() + absl::Seconds(10);
  for (;;) {
    la = a->store->leadership();
    lb = b->store->leadership();
    const absl::Time now = MonotonicNow();  // After both: each held then.
    both |= la.CanOrder(now) && lb.CanOrder(now);
    if (lb.CanOrder(now) || absl::Now() > until) break;
    absl::SleepFor(absl::Microseconds(500));
  }
  ASSERT_TRUE(b->Leads()) << "the standby did not take over";
  EXPECT_FALSE(both) << "two coordinators could order changes at once";
  EXPECT_FALSE(a->Leads());
  // The old leader may renew leases a little past the takeover — a server
  // it renewed then fences itself 3/4 of a lease later — but no later than
  // a quarter lease after it: the new leader takes a server away no
  // earlier than a lease after its takeover. (`lb` as first seen: its
  // window counts from the takeover's write, sent before it took effect.)
  const absl::Time takeover_sent =
      lb.renew_until - (EtcdStateStore::TakeoverAfter(kLease) + kLease / 4) * 9 / 10;
  EXPECT_LE(a->store->leadership().renew_until, takeover_sent + kLease / 4);
  const uint64_t term = b->store->leadership().term;
  ASSERT_TRUE(b->store->Commit(State(9, term)).ok());
  etcd_->Cont(0);
  // Back in touch, the old leader follows the new one's state.
  EXPECT_TRUE(a->recorder.WaitForEpoch(9));
  EXPECT_FALSE(a->store->Commit(State(10, term - 1)).ok());
  EXPECT_TRUE(b->Leads());
}

// Two coordinators that both believe they lead: the old one's change is
// refused by etcd (its transaction names a leader key revision that is no
// longer current), and nothing it tried is stored.
TEST_F(EtcdStateStoreTest, ADeposedLeaderCannotStoreAChange) {
  auto a = Start("a");
  WaitToLead(*a);
  ASSERT_TRUE(a->Leads());
  const uint64_t term = a->store->leadership().term;
  ASSERT_TRUE(a->store->Commit(State(4, term)).ok());
  // Another coordinator takes over (as one that saw `a` silent would).
  std::unique_ptr<etcd::EtcdClient> other = Client();
  auto leader = other->Get(std::string(kPrefix) + "/leader");
  ASSERT_TRUE(leader.ok() && leader->has_value());
  auto took = other->Txn({{std::string(kPrefix) + "/leader", etcd::Compare::Target::kModRevision,
                           (*leader)->mod_revision, ""}},
                         {{std::string(kPrefix) + "/leader", "z 127.0.0.1:z 1"}});
  ASSERT_TRUE(took.ok() && took->succeeded);
  // `a` has not noticed yet, and tries.
  absl::Status s = a->store->Commit(State(5, term));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_FALSE(a->Leads());
  auto stored = other->Get(std::string(kPrefix) + "/state");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  proto::ClusterMap m;
  ASSERT_TRUE(m.ParseFromString((*stored)->value));
  EXPECT_EQ(m.epoch(), 4u) << "the deposed leader's change was stored";
}

TEST_F(EtcdStateStoreTest, AStateFileIsImportedOnceIntoAnEmptyEtcd) {
  auto a = Start("a", {}, State(7, 2));
  WaitToLead(*a);
  ASSERT_TRUE(a->Leads());
  EXPECT_EQ(a->recorder.last().epoch(), 7u);
  EXPECT_EQ(a->recorder.last().term(), 3u);
  a.reset();
  // Another import later changes nothing: etcd's state stands.
  auto b = Start("b", {}, State(50, 9));
  WaitToLead(*b);
  ASSERT_TRUE(b->Leads());
  EXPECT_EQ(b->recorder.last().epoch(), 7u);
  EXPECT_EQ(b->recorder.last().term(), 4u);
}

// etcd without a quorum: the leader stops acting once its leadership
// lapses and stores nothing; with the quorum back, a coordinator leads
// again with no one's help.
TEST_F(EtcdStateStoreTest, WithoutAQuorumNothingIsStoredAndLeadershipComesBack) {
  auto a = Start("a");
  WaitToLead(*a);
  ASSERT_TRUE(a->Leads());
  const uint64_t term = a->store->leadership().term;
  ASSERT_TRUE(a->store->Commit(State(2, term)).ok());
  etcd_->Kill(1);
  etcd_->Kill(2);
  const absl::Time lapse = absl::Now() + absl::Seconds(10);
  while (a->store->leadership().CanRenew(MonotonicNow()) && absl::Now() < lapse) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_FALSE(a->store->leadership().CanRenew(MonotonicNow()));
  EXPECT_FALSE(a->store->Commit(State(3, term)).ok());
  ASSERT_TRUE(etcd_->Restart(1).ok());
  ASSERT_TRUE(etcd_->Restart(2).ok());
  const absl::Time back = absl::Now() + absl::Seconds(20);
  while (!a->Leads() && absl::Now() < back) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(a->Leads()) << "no leadership once the quorum was back";
  // Nothing was stored meanwhile.
  auto stored = Client()->Get(std::string(kPrefix) + "/state");
  ASSERT_TRUE(stored.ok() && stored->has_value()) << stored.status();
  proto::ClusterMap m;
  ASSERT_TRUE(m.ParseFromString((*stored)->value));
  EXPECT_EQ(m.epoch(), 2u);
  EXPECT_TRUE(a->store->Commit(State(3, a->store->leadership().term)).ok());
}

}  // namespace
}  // namespace rkv::server
