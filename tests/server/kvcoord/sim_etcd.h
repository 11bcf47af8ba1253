// A simulated etcd for the deterministic simulation: the coordinators'
// real EtcdStateStore runs on top of it, in one thread, on a simulated
// clock, reproducibly from a seed.
//
// What it keeps of etcd, because the store's safety rests on it
// (server/kvcoord/etcd/kv_store.h states the contract):
// - one store revision, and per key its create and mod revisions; a
//   transaction's compares as etcd's (kModRevision, kCreateRevision: 0
//   means absent; kValue: false on an absent key), and its puts and
//   deletes all at one new revision;
// - watches from a revision, delivering every change of their key in
//   order, exactly once, each after a drawn delay, however often their
//   stream breaks (it resumes from the last revision delivered). History
//   is never compacted, so the compaction case of the contract does not
//   arise here.
//
// And its faults, drawn from the seed:
// - a leader change while a call is in flight: a Get fails (UNAVAILABLE),
//   a Txn may or may not have been committed and answers
//   DEADLINE_EXCEEDED; then an election, during which every call is
//   refused (UNAVAILABLE: no leader, nothing proposed), and some watch
//   streams break;
// - the quorum lost for a while: reads UNAVAILABLE; a Txn either refused
//   (UNAVAILABLE) or proposed to a leader that cannot commit it
//   (DEADLINE_EXCEEDED), and such a proposal may commit once the quorum
//   is back — its compares judged then;
// - one coordinator cut off from every member (a partition): its calls
//   UNAVAILABLE, a Txn in flight when it happened DEADLINE_EXCEEDED and
//   perhaps committed, its watch streams down until it heals;
// - a watch stream that breaks and resumes later; deliveries delayed.
// A node the simulator holds (a paused process) gets no watch deliveries:
// its watch threads are paused too.
//
// Calls answer at once, on the caller's stack: a call that takes long is
// modelled by its outcome-unknown answer and a commit that happens later,
// and a caller paused between deciding and calling by the simulator. Not
// thread-safe: everything runs on the simulator's one thread.
#ifndef RKV_TESTS_SERVER_KVCOORD_SIM_ETCD_H_
#define RKV_TESTS_SERVER_KVCOORD_SIM_ETCD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "server/kvcoord/etcd/kv_store.h"

namespace rkv::server::testing {

class SimEtcd {
 public:
  struct Options {
    // Per call, while faults are on: a leader change in the middle of it,
    // and the caller cut off in the middle of it.
    double leader_change_per_call = 0.002;
    double partition_per_call = 0.002;
    absl::Duration election_min = absl::Milliseconds(100);
    absl::Duration election_max = absl::Milliseconds(900);
    absl::Duration partition_max = absl::Seconds(2);
    // A watch delivery comes this long after its change at most; a few
    // come late (up to watch_delay_max), most within a few ms.
    absl::Duration watch_delay_max = absl::Milliseconds(150);
  };

  // One committed change of a key.
  struct Change {
    int64_t revision = 0;
    std::optional<etcd::KeyValue> kv;  // nullopt: deleted.
    int writer = -1;                   // The node whose transaction it was.
    absl::Time at;
  };

  // `trace` gets a line for every call, answer, fault and delivery.
  SimEtcd(uint64_t seed, Options options, std::function<void(const std::string&)> trace);
  ~SimEtcd();
  SimEtcd(const SimEtcd&) = delete;
  SimEtcd& operator=(const SimEtcd&) = delete;

  // A client for node `node` (partitions and holds are per node). The
  // client must not outlive the SimEtcd.
  std::unique_ptr<etcd::KvStore> Client(int node);

  // The true (simulated) time moves on: elections, lost quorums,
  // partitions and broken streams that end by `now` end, and proposals
  // left pending commit or are dropped.
  void AdvanceTo(absl::Time now);
  absl::Time now() const { return now_; }
  // Delivers the watch events due by now to `node`'s watches (-1: every
  // node's), in order; not to a held node. How many.
  int Deliver(int node = -1);

  // Per-call faults drawn (true) or none (the quiet end of a run).
  void set_faults(bool on) { faults_ = on; }
  // Faults the simulator draws between calls.
  void ChangeLeader();
  void LoseQuorum(absl::Duration for_how_long);
  void Partition(int node, absl::Duration for_how_long);
  void BreakWatches(int node, absl::Duration down_for);
  void Hold(int node, bool held);
  // `node`'s process dies: its watches with it, and its calls (its
  // store's last words, say) reach no one, until Revive.
  void Crash(int node);
  void Revive(int node);
  // When every fault now under way is over.
  absl::Time FaultsEnd() const;

  // Every committed change of `key`, oldest first.
  const std::vector<Change>& History(const std::string& key) { return history_[key]; }
  // How often each kind of fault happened.
  const std::map<std::string, int>& counts() const { return counts_; }

 private:
  class SimClient;
  class SimWatch;
  struct WatchState;
  struct Pending;

  absl::StatusOr<std::optional<etcd::KeyValue>> Get(int node, const std::string& key,
                                                    int64_t* revision);
  absl::StatusOr<etcd::TxnResult> Txn(int node, const std::vector<etcd::Compare>& compares,
                                      const std::vector<std::pair<std::string, std::string>>& puts,
                                      const std::vector<std::string>& deletes);
  std::unique_ptr<etcd::Watch> WatchKey(int node, const std::string& key, int64_t from,
                                        etcd::WatchCallback on_change);
  std::vector<etcd::MemberStatus> Status();

  // Applies a transaction now: whether its compares held.
  etcd::TxnResult Apply(int writer, const std::vector<etcd::Compare>& compares,
                        const std::vector<std::pair<std::string, std::string>>& puts,
                        const std::vector<std::string>& deletes);
  void Record(const std::string& key, int writer);
  void Enqueue(WatchState& w, const Change& c);
  void Resume(WatchState& w);
  bool Partitioned(int node) const { return partitioned_until_.count(node) != 0; }
  bool Healthy() const;
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  absl::Duration Between(absl::Duration lo, absl::Duration hi);
  absl::Duration WatchDelay();
  void Count(const std::string& kind) { ++counts_[kind]; }
  void Trace(const std::string& line);

  const Options options_;
  std::mt19937_64 rng_;
  std::function<void(const std::string&)> trace_;
  absl::Time now_ = absl::UnixEpoch();
  bool faults_ = true;
  int64_t revision_ = 1;  // etcd starts at 1 with nothing stored.
  std::map<std::string, etcd::KeyValue> data_;
  std::map<std::string, std::vector<Change>> history_;
  std::vector<std::shared_ptr<WatchState>> watches_;
  uint64_t next_seq_ = 0;
  absl::Time election_until_ = absl::InfinitePast();
  absl::Time quorum_until_ = absl::InfinitePast();
  std::map<int, absl::Time> partitioned_until_;
  std::map<int, bool> held_;
  std::set<int> crashed_;
  std::vector<Pending> pending_;
  std::map<std::string, int> counts_;
};

}  // namespace rkv::server::testing

#endif  // RKV_TESTS_SERVER_KVCOORD_SIM_ETCD_H_
