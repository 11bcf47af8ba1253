// The coordinator's etcd client against real etcd clusters on loopback:
// what the coordinator relies on when it keeps its state there. Reads and
// conditional writes do what etcd's transactions promise; a watch delivers
// every change once and in order, also when the member it streams from is
// killed or hangs; one member of three lost costs a call at most a few
// call_timeouts; without a quorum a write fails in time instead of hanging,
// and works again once a quorum is back.
#include "server/kvcoord/etcd/etcd_client.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/kvcoord/etcd_cluster.h"

namespace rkv::server::etcd {
namespace {

using ::rkv::testing::EtcdCluster;
using ::testing::AnyOf;
using ::testing::ElementsAreArray;

std::unique_ptr<EtcdCluster> StartCluster(int members) {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start(members);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

// For tests of what calls do, not of how soon: on a loaded machine etcd
// can stall for half a second, now and then for two (seen on two shared
// cores), and a write that outlives its deadline has an unknown outcome,
// which such a test cannot take for an answer.
EtcdOptions Patient(std::vector<std::string> endpoints) {
  EtcdOptions options;
  options.endpoints = std::move(endpoints);
  options.call_timeout = absl::Seconds(2);
  options.total_timeout = absl::Seconds(6);
  return options;
}

// For tests of failing over. A call spends at most call_timeout on each
// member (a dead one refuses at once; one whose leader died holds it until
// a new one is elected), so with one member of three down it returns
// within kCallBound: call_timeout times three, and slack. total_timeout is
// longer, so that a stall of the machine makes the bound fail, not the
// call.
EtcdOptions Failover(std::vector<std::string> endpoints) {
  EtcdOptions options;
  options.endpoints = std::move(endpoints);
  options.call_timeout = absl::Seconds(1);
  options.total_timeout = absl::Seconds(6);
  return options;
}
constexpr absl::Duration kCallBound = absl::Milliseconds(3500);

std::unique_ptr<EtcdClient> Connect(EtcdOptions options) {
  absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// The endpoints with member `first` first: a new client starts there, and
// so does its first watch.
std::vector<std::string> StartingAt(const EtcdCluster& cluster, int first) {
  std::vector<std::string> out;
  for (int k = 0; k < cluster.size(); ++k) {
    out.push_back(cluster.endpoint((first + k) % cluster.size()));
  }
  return out;
}

// Puts key=value over the key's revision `*last` (0: absent), as the
// coordinator writes: conditioned on the revision it read, so that a try
// whose outcome was unknown cannot also land after a later one did. After
// such a try it reads the key to tell (the values a test puts are unique).
// Returns the revision the value was put at, and makes it `*last`; 0 after
// 10 s.
int64_t PutSurely(EtcdClient& client, const std::string& key, const std::string& value,
                  int64_t* last) {
  const Compare unchanged{.key = key, .target = Compare::Target::kModRevision, .revision = *last};
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    absl::StatusOr<TxnResult> put = client.Txn({unchanged}, {{key, value}});
    if (put.ok() && put->succeeded) return *last = put->revision;
    absl::StatusOr<std::optional<KeyValue>> now = client.Get(key);
    if (now.ok() && now->has_value() && (*now)->value == value) {
      return *last = (*now)->mod_revision;
    }
    if (now.ok() && put.ok()) break;  // Someone else changed the key.
  }
  ADD_FAILURE() << "could not put " << key << "=" << value;
  return 0;
}

// A watch's deliveries, as "value@revision" ("-@revision" for a delete).
class Recorder {
 public:
  std::function<void(const std::optional<KeyValue>&, int64_t)> Callback() {
    return [this](const std::optional<KeyValue>& kv, int64_t revision) {
      std::lock_guard<std::mutex> lock(mu_);
      if (kv.has_value()) {
        EXPECT_EQ(kv->mod_revision, revision);
      }
      seen_.push_back(absl::StrCat(kv.has_value() ? kv->value : "-", "@", revision));
      cv_.notify_all();
    };
  }
  // What was delivered once `count` deliveries have come or 10 s passed.
  std::vector<std::string> WaitFor(size_t count) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return seen_.size() >= count; });
    return seen_;
  }
  std::vector<std::string> Seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> seen_;
};

TEST(EtcdClientTest, CreateRefusesWhatCannotWork) {
  EXPECT_EQ(EtcdClient::Create(EtcdOptions()).status().code(), absl::StatusCode::kInvalidArgument);
  EtcdOptions tls;
  tls.endpoints = {"127.0.0.1:1"};
  tls.ca_file = ::testing::TempDir() + "/no-such-ca.pem";
  EXPECT_FALSE(EtcdClient::Create(tls).ok());
  EtcdOptions half;
  half.endpoints = {"127.0.0.1:1"};
  half.cert_file = "/etc/hostname";
  EXPECT_EQ(EtcdClient::Create(half).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EtcdClientTest, GetOfAMissingKeyIsNotAnError) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(1);
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<EtcdClient> client = Connect(Patient(cluster->endpoints()));
  int64_t revision = 0;
  absl::StatusOr<std::optional<KeyValue>> kv = client->Get("missing", &revision);
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_FALSE(kv->has_value());
  EXPECT_GE(revision, 1);
}

TEST(EtcdClientTest, TxnPutsWhenEveryCompareHolds) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(1);
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<EtcdClient> client = Connect(Patient(cluster->endpoints()));

  // Create-if-absent: create_revision 0 means the key does not exist.
  Compare absent{.key = "a", .target = Compare::Target::kCreateRevision, .revision = 0};
  absl::StatusOr<TxnResult> created = client->Txn({absent}, {{"a", "1"}, {"b", "1"}});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->succeeded);
  absl::StatusOr<std::optional<KeyValue>> a = client->Get("a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->value, "1");
  EXPECT_EQ((*a)->create_revision, created->revision);
  EXPECT_EQ((*a)->mod_revision, created->revision);

  // Compare-and-set on the revision it was read at; and on the value.
  Compare unchanged{
      .key = "a", .target = Compare::Target::kModRevision, .revision = created->revision};
  Compare b_is_1{.key = "b", .target = Compare::Target::kValue, .value = "1"};
  absl::StatusOr<TxnResult> updated = client->Txn({unchanged, b_is_1}, {{"a", "2"}}, {"b"});
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_TRUE(updated->succeeded);
  EXPECT_GT(updated->revision, created->revision);
  a = client->Get("a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->value, "2");
  EXPECT_EQ((*a)->create_revision, created->revision);
  EXPECT_EQ((*a)->mod_revision, updated->revision);
  absl::StatusOr<std::optional<KeyValue>> b = client->Get("b");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->has_value());
}

TEST(EtcdClientTest, TxnChangesNothingWhenACompareFails) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(1);
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<EtcdClient> client = Connect(Patient(cluster->endpoints()));
  absl::StatusOr<TxnResult> first = client->Txn({}, {{"k", "v1"}, {"other", "o1"}});
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<TxnResult> second = client->Txn({}, {{"k", "v2"}});
  ASSERT_TRUE(second.ok()) << second.status();

  const Compare stale{
      .key = "k", .target = Compare::Target::kModRevision, .revision = first->revision};
  const Compare exists_not{.key = "k", .target = Compare::Target::kCreateRevision, .revision = 0};
  const Compare wrong_value{.key = "k", .target = Compare::Target::kValue, .value = "v1"};
  const Compare holds{.key = "other", .target = Compare::Target::kValue, .value = "o1"};
  for (const Compare& failing : {stale, exists_not, wrong_value}) {
    // One failing compare among holding ones is enough.
    absl::StatusOr<TxnResult> txn =
        client->Txn({holds, failing}, {{"k", "lost"}, {"other", "lost"}}, {"absent"});
    ASSERT_TRUE(txn.ok()) << txn.status();
    EXPECT_FALSE(txn->succeeded);
    EXPECT_EQ(txn->revision, second->revision);  // Nothing was written.
  }
  absl::StatusOr<std::optional<KeyValue>> k = client->Get("k");
  ASSERT_TRUE(k.ok() && k->has_value());
  EXPECT_EQ((*k)->value, "v2");
  EXPECT_EQ((*k)->mod_revision, second->revision);
  absl::StatusOr<std::optional<KeyValue>> other = client->Get("other");
  ASSERT_TRUE(other.ok() && other->has_value());
  EXPECT_EQ((*other)->value, "o1");
}

TEST(EtcdClientTest, WatchDeliversEveryChangeInOrderOnce) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(1);
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<EtcdClient> client = Connect(Patient(cluster->endpoints()));
  absl::StatusOr<TxnResult> before = client->Txn({}, {{"unwatched", "x"}});
  ASSERT_TRUE(before.ok()) << before.status();

  // One watch from the next revision on, started before the changes; one
  // from the same revision, started after them (it replays history).
  Recorder live;
  std::unique_ptr<Watch> live_watch = client->WatchKey("w", before->revision + 1, live.Callback());
  std::vector<std::string> expected;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<TxnResult> txn =
        i % 5 == 4 ? client->Txn({}, {}, {"w"}) : client->Txn({}, {{"w", absl::StrCat("v", i)}});
    ASSERT_TRUE(txn.ok()) << txn.status();
    expected.push_back(absl::StrCat(i % 5 == 4 ? "-" : absl::StrCat("v", i), "@", txn->revision));
    // Changes of other keys are not delivered.
    ASSERT_TRUE(client->Txn({}, {{"unwatched", absl::StrCat(i)}}).ok());
  }
  Recorder replay;
  std::unique_ptr<Watch> replay_watch =
      client->WatchKey("w", before->revision + 1, replay.Callback());
  EXPECT_THAT(live.WaitFor(expected.size()), ElementsAreArray(expected));
  EXPECT_THAT(replay.WaitFor(expected.size()), ElementsAreArray(expected));

  // And nothing more: a later change is the next delivery.
  absl::StatusOr<TxnResult> last = client->Txn({}, {{"w", "last"}});
  ASSERT_TRUE(last.ok());
  expected.push_back(absl::StrCat("last@", last->revision));
  EXPECT_THAT(live.WaitFor(expected.size()), ElementsAreArray(expected));
}

TEST(EtcdClientTest, WatchFromNowSeesOnlyLaterChanges) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(1);
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<EtcdClient> client = Connect(Patient(cluster->endpoints()));
  ASSERT_TRUE(client->Txn({}, {{"w", "old"}}).ok());
  Recorder recorder;
  std::unique_ptr<Watch> watch = client->WatchKey("w", 0, recorder.Callback());
  // "Now" is when the stream is created, which the caller does not see:
  // put until something is delivered, then once more. What is delivered
  // is every put from some point on, without the old value or a gap.
  std::vector<std::string> puts;
  for (int i = 0; i < 200 && recorder.Seen().empty(); ++i) {
    absl::StatusOr<TxnResult> txn = client->Txn({}, {{"w", absl::StrCat("new", i)}});
    ASSERT_TRUE(txn.ok()) << txn.status();
    puts.push_back(absl::StrCat("new", i, "@", txn->revision));
    absl::SleepFor(absl::Milliseconds(50));
  }
  absl::StatusOr<TxnResult> last = client->Txn({}, {{"w", "last"}});
  ASSERT_TRUE(last.ok()) << last.status();
  puts.push_back(absl::StrCat("last@", last->revision));
  std::vector<std::string> seen;
  for (int i = 0; i < 500; ++i) {
    seen = recorder.Seen();
    if (!seen.empty() && seen.back() == puts.back()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_FALSE(seen.empty());
  ASSERT_LE(seen.size(), puts.size());
  EXPECT_THAT(seen, ElementsAreArray(puts.end() - seen.size(), puts.end()));
}

TEST(EtcdClientTest, WatchAfterCompactionDeliversTheKeyAsItIsOnce) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(1);
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<EtcdClient> client = Connect(Patient(cluster->endpoints()));
  absl::StatusOr<TxnResult> first = client->Txn({}, {{"w", "1"}});
  ASSERT_TRUE(first.ok());
  absl::StatusOr<TxnResult> second = client->Txn({}, {{"w", "2"}});
  ASSERT_TRUE(second.ok());
  absl::StatusOr<TxnResult> third = client->Txn({}, {{"x", "x"}});
  ASSERT_TRUE(third.ok());
  // etcd's own tool compacts: the client has no call for it.
  const std::string compact =
      absl::StrCat("ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=", cluster->endpoint(0), " compact ",
                   third->revision, " >/dev/null 2>&1");
  ASSERT_EQ(std::system(compact.c_str()), 0);

  Recorder recorder;
  std::unique_ptr<Watch> watch = client->WatchKey("w", first->revision, recorder.Callback());
  const std::string now = absl::StrCat("2@", second->revision);
  EXPECT_THAT(recorder.WaitFor(1), ElementsAreArray({now}));
  absl::StatusOr<TxnResult> later = client->Txn({}, {{"w", "3"}});
  ASSERT_TRUE(later.ok());
  EXPECT_THAT(recorder.WaitFor(2), ElementsAreArray({now, absl::StrCat("3@", later->revision)}));
}

// The member the watch streams from is the leader, and is killed halfway
// through the changes: the watch goes on at another member from where it
// was, losing and repeating nothing.
TEST(EtcdClientTest, WatchGoesOnAcrossTheKillOfItsMember) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(3);
  ASSERT_NE(cluster, nullptr);
  const int leader = cluster->WaitForLeader();
  ASSERT_GE(leader, 0);
  std::unique_ptr<EtcdClient> watcher = Connect(Failover(StartingAt(*cluster, leader)));
  std::unique_ptr<EtcdClient> writer = Connect(Failover(cluster->endpoints()));
  int64_t start = 0;
  ASSERT_TRUE(writer->Get("w", &start).ok());
  Recorder recorder;
  std::unique_ptr<Watch> watch = watcher->WatchKey("w", start + 1, recorder.Callback());

  int64_t last = 0;  // "w" is absent.
  std::vector<std::string> expected;
  for (int i = 0; i < 30; ++i) {
    if (i == 10) {
      // Only once the watch has shown it streams: the kill is then of a
      // live stream, not of one not yet opened.
      ASSERT_EQ(recorder.WaitFor(expected.size()).size(), expected.size());
      cluster->Kill(leader);
    }
    const std::string value = absl::StrCat("v", i);
    const int64_t revision = PutSurely(*writer, "w", value, &last);
    ASSERT_NE(revision, 0);
    expected.push_back(absl::StrCat(value, "@", revision));
  }
  EXPECT_THAT(recorder.WaitFor(expected.size()), ElementsAreArray(expected));
  absl::SleepFor(absl::Milliseconds(200));  // Room for a duplicate to show.
  EXPECT_EQ(recorder.Seen().size(), expected.size());
}

// A member that hangs (SIGSTOP) keeps its connections open, so its stream
// does not break: the watch finds out by its status calls and moves on.
TEST(EtcdClientTest, WatchLeavesAMemberThatHangs) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(3);
  ASSERT_NE(cluster, nullptr);
  const int leader = cluster->WaitForLeader();
  ASSERT_GE(leader, 0);
  const int hung = (leader + 1) % 3;  // A follower: the cluster goes on without it.
  std::unique_ptr<EtcdClient> watcher = Connect(Failover(StartingAt(*cluster, hung)));
  // The writer never sends to the hung member, which would apply what it
  // was sent once it resumed.
  std::unique_ptr<EtcdClient> writer =
      Connect(Patient({cluster->endpoint(leader), cluster->endpoint((leader + 2) % 3)}));
  int64_t start = 0;
  ASSERT_TRUE(writer->Get("w", &start).ok());
  Recorder recorder;
  std::unique_ptr<Watch> watch = watcher->WatchKey("w", start + 1, recorder.Callback());
  std::vector<std::string> expected;
  absl::StatusOr<TxnResult> first = writer->Txn({}, {{"w", "before"}});
  ASSERT_TRUE(first.ok()) << first.status();
  expected.push_back(absl::StrCat("before@", first->revision));
  ASSERT_EQ(recorder.WaitFor(1).size(), 1u);

  cluster->Stop(hung);
  const absl::Time stopped = absl::Now();
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<TxnResult> txn = writer->Txn({}, {{"w", absl::StrCat("v", i)}});
    ASSERT_TRUE(txn.ok()) << txn.status();
    expected.push_back(absl::StrCat("v", i, "@", txn->revision));
  }
  EXPECT_THAT(recorder.WaitFor(expected.size()), ElementsAreArray(expected));
  // Two call_timeouts to notice (2 s), the writes, and slack.
  EXPECT_LE(absl::Now() - stopped, absl::Seconds(6));
  cluster->Cont(hung);
}

TEST(EtcdClientTest, DestroyingAWatchIsPrompt) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(1);
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<EtcdClient> client = Connect(Patient(cluster->endpoints()));
  Recorder recorder;
  std::unique_ptr<Watch> watch = client->WatchKey("w", 0, recorder.Callback());
  ASSERT_TRUE(client->Txn({}, {{"w", "1"}}).ok());
  // Put until one is seen: the stream is then open and idle.
  for (int i = 0; i < 100 && recorder.Seen().empty(); ++i) {
    ASSERT_TRUE(client->Txn({}, {{"w", absl::StrCat(i)}}).ok());
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_FALSE(recorder.Seen().empty());
  absl::SleepFor(absl::Milliseconds(300));  // Mid-way in the prober's 2 s wait.
  const absl::Time before = absl::Now();
  watch.reset();
  EXPECT_LE(absl::Now() - before, absl::Seconds(1));
}

// One member of three killed, the etcd leader among the cases: reads and
// transactions go on, each call within a few call_timeouts, also when the
// client was using that member.
TEST(EtcdClientTest, OneMemberOfThreeDownLeavesGetAndTxnWorking) {
  for (const bool kill_leader : {true, false}) {
    SCOPED_TRACE(kill_leader ? "leader killed" : "follower killed");
    std::unique_ptr<EtcdCluster> cluster = StartCluster(3);
    ASSERT_NE(cluster, nullptr);
    const int leader = cluster->WaitForLeader();
    ASSERT_GE(leader, 0);
    const int victim = kill_leader ? leader : (leader + 1) % 3;
    std::unique_ptr<EtcdClient> client = Connect(Failover(StartingAt(*cluster, victim)));
    int64_t put = 0;
    // The client now prefers the victim (unless a stall made it move on).
    ASSERT_NE(PutSurely(*client, "k", "before", &put), 0);

    cluster->Kill(victim);
    absl::Time start = absl::Now();
    absl::StatusOr<std::optional<KeyValue>> got = client->Get("k");
    EXPECT_LE(absl::Now() - start, kCallBound);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ((*got)->value, "before");

    const Compare unchanged{.key = "k", .target = Compare::Target::kModRevision, .revision = put};
    start = absl::Now();
    absl::StatusOr<TxnResult> txn = client->Txn({unchanged}, {{"k", "after"}});
    EXPECT_LE(absl::Now() - start, kCallBound);
    ASSERT_TRUE(txn.ok()) << txn.status();
    EXPECT_TRUE(txn->succeeded);

    // A client that starts on the dead member, too.
    std::unique_ptr<EtcdClient> fresh = Connect(Failover(StartingAt(*cluster, victim)));
    start = absl::Now();
    got = fresh->Get("k");
    EXPECT_LE(absl::Now() - start, kCallBound);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ((*got)->value, "after");
  }
}

TEST(EtcdClientTest, WithoutQuorumTxnFailsInTimeAndWorksOnceAMemberIsBack) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(3);
  ASSERT_NE(cluster, nullptr);
  const int leader = cluster->WaitForLeader();
  ASSERT_GE(leader, 0);
  // The default timeouts: 500 ms a member, 2 s in all.
  EtcdOptions defaults;
  defaults.endpoints = cluster->endpoints();
  std::unique_ptr<EtcdClient> client = Connect(defaults);
  int64_t put = 0;
  ASSERT_NE(PutSurely(*client, "k", "before", &put), 0);

  const int survivor = (leader + 1) % 3;
  const int back = (leader + 2) % 3;
  cluster->Kill(leader);
  cluster->Kill(back);
  const absl::Time start = absl::Now();
  absl::StatusOr<TxnResult> txn = client->Txn({}, {{"k", "no quorum"}});
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(txn.ok());
  EXPECT_THAT(txn.status().code(),
              AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded))
      << txn.status();
  EXPECT_LE(took, client->options().total_timeout + absl::Seconds(1));
  // A read cannot be served either, and says so in time.
  const absl::Time read_start = absl::Now();
  absl::StatusOr<std::optional<KeyValue>> got = client->Get("k");
  EXPECT_FALSE(got.ok());
  EXPECT_LE(absl::Now() - read_start, client->options().total_timeout + absl::Seconds(1));
  EXPECT_TRUE(cluster->running(survivor));

  // Back to a quorum, the same client writes again (its connection to the
  // member that came back is remade in the background).
  const absl::Status restarted = cluster->Restart(back);
  ASSERT_TRUE(restarted.ok()) << restarted;
  int64_t absent = 0;
  const absl::Time again = absl::Now();
  EXPECT_NE(PutSurely(*client, "new", "after", &absent), 0);
  EXPECT_LE(absl::Now() - again, absl::Seconds(5));
}

TEST(EtcdClientTest, StatusMarksAKilledMemberAndNamesOneLeader) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster(3);
  ASSERT_NE(cluster, nullptr);
  const int leader = cluster->WaitForLeader();
  ASSERT_GE(leader, 0);
  std::unique_ptr<EtcdClient> client = Connect(Failover(cluster->endpoints()));
  cluster->Kill(leader);

  // The two left elect a leader among themselves; until then they may
  // still name the dead one, or none.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<MemberStatus> status;
  for (;;) {
    status = client->Status();
    ASSERT_EQ(status.size(), 3u);
    int leaders = 0;
    for (const MemberStatus& s : status) leaders += s.is_leader();
    if (leaders == 1 && status[(leader + 1) % 3].leader_id == status[(leader + 2) % 3].leader_id) {
      break;
    }
    ASSERT_LT(absl::Now(), deadline) << "no single leader named";
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(status[i].endpoint, cluster->endpoint(i));
    if (i == leader) {
      EXPECT_FALSE(status[i].status.ok());
      EXPECT_FALSE(status[i].is_leader());
    } else {
      EXPECT_TRUE(status[i].status.ok()) << status[i].status;
      EXPECT_EQ(status[i].member_id, cluster->member_id(i));
      EXPECT_NE(status[i].leader_id, cluster->member_id(leader));
      EXPECT_GT(status[i].raft_term, 0u);
      EXPECT_GT(status[i].db_size, 0);
    }
  }
}

}  // namespace
}  // namespace rkv::server::etcd
