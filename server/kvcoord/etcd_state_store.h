// The coordinator's state in etcd, shared by several coordinators of which
// one leads. Two keys under a prefix: `<prefix>/leader` names the leader
// (id, address, and a nonce of its leadership), `<prefix>/state` holds the
// cluster map.
//
// Leadership is a lease on the leader key, kept on the coordinators' own
// clocks rather than with an etcd lease (whose shortest TTL, a second or
// more, and whose renewal of every lease when etcd's own leader changes
// would make a lost coordinator cost more than a server's lease can
// bear):
// - the leader rewrites the leader key every `refresh_every`, each write
//   conditioned on the key's revision being the one it last wrote;
// - a standby watches the key and takes over — a write conditioned on the
//   revision it last saw — once it has seen no write for `takeover_after`;
// - so no other coordinator can lead before `takeover_after` has passed
//   since the leader's last successful write was sent. The leader orders
//   changes only until then (less a margin for clocks that run at
//   slightly different rates), and renews servers' leases a quarter lease
//   longer: a server renewed then fences itself three quarters of a lease
//   later, before a new leader, which counts every lease from its own
//   start, can have declared it lost.
// Every change of the state is one transaction conditioned on the leader
// key's revision (the writer still leads) and the state key's (nothing
// changed it since), and refreshes the leadership as it goes. On taking
// over, a coordinator stores the state again under the next term, which
// servers use to refuse a deposed leader.
//
// A core and a shell. Every decision — when to read etcd again, refresh,
// try to take over, what a watch event or a refused commit changes, what
// Commit checks — is in the core: Due() says, by the store's clock, which
// action is due (or when one may be), and Do() carries it out, through the
// etcd::KvStore it was given. The shell is a thread that calls them in
// turn and sleeps in between, woken by watch events. The deterministic
// simulation (tests/server/kvcoord/etcd_state_store_sim_test.cc) is
// another driver: it runs several stores in one thread over a simulated
// etcd and clock, and may deliver watch events, commit, or let other
// stores act between a Due() and its Do(), as threads would interleave —
// so each action checks again what it was decided on.
#ifndef RKV_SERVER_KVCOORD_ETCD_STATE_STORE_H_
#define RKV_SERVER_KVCOORD_ETCD_STATE_STORE_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/monotonic_clock.h"
#include "server/kvcoord/etcd/kv_store.h"
#include "server/kvcoord/state_store.h"

namespace rkv::server {

struct EtcdStoreOptions {
  // Keys `<prefix>/leader` and `<prefix>/state`: one cluster per prefix.
  std::string prefix = "/rkv";
  // This coordinator.
  std::string id;
  std::string address;
  // The servers' lease: the leadership's timing is derived from it.
  absl::Duration lease = absl::Seconds(3);
  // The state to start from when etcd holds none for the prefix (a
  // one-process coordinator's state file moved in); epoch 0: none.
  proto::ClusterMap import;
  // The monotonic clock every time of the leadership is read on: when the
  // leader key was seen, when to refresh and take over, and the
  // leadership()'s deadlines, which a coordinator must compare with this
  // same clock's now. Empty: the machine's monotonic clock. Coordinators'
  // clocks may run at different rates, as long as a time one measures as
  // d no other measures as less than 0.9 d (Margin below): rates within
  // ±5 % of each other's mean, say.
  Clock clock;
  // Start runs the shell's thread. False: the caller drives the core
  // (Due, Do) itself, as the deterministic simulation does.
  bool own_thread = true;
};

class EtcdStateStore final : public StateStore {
 public:
  EtcdStateStore(std::unique_ptr<etcd::KvStore> client, EtcdStoreOptions options);
  ~EtcdStateStore() override;

  absl::Status Start(Listener& listener) override;
  void Stop() override;
  absl::Status Commit(const proto::ClusterMap& state) override;
  Leadership leadership() const override;
  bool Current() const override;
  std::string LeaderAddress() const override;
  StoreDescription Describe() const override;

  // What the core asks its driver to do.
  enum class Action {
    kNone,
    kResync,    // Read the leader key and the state, and follow or lead.
    kRefresh,   // Rewrite the leader key (it leads).
    kTakeOver,  // Write the leader key as last seen, and lead.
  };
  // The action due now by the store's clock; kNone before Start, after
  // Stop, or when none is, and then `*next` (if not null) is when one may
  // be — earlier if a watch event or a refused commit comes first, so a
  // driver also asks again after those.
  Action Due(absl::Time* next = nullptr);
  // Carries `action` out (after Due returned it, at once or later: each
  // action checks again under the store's lock what it depends on).
  void Do(Action action);
  static const char* ActionName(Action action);

  // The leadership's timing (see the file comment).
  static absl::Duration RefreshEvery(absl::Duration lease) { return lease / 15; }
  static absl::Duration TakeoverAfter(absl::Duration lease) { return lease / 3; }

 private:
  // What a coordinator of another clock rate could see as `d`: 10 % less.
  static absl::Duration Margin(absl::Duration d) { return d * 9 / 10; }
  // How long an order may take to reach a server after it was decided (a
  // server's try of one coordinator): orders stop this much earlier.
  static absl::Duration InFlight(absl::Duration lease) { return lease / 12; }

  // The shell: Due and Do in turn, waiting in between.
  void Run();
  // Ends the shell's wait (a watch event, a refused commit).
  void WakeLocked();
  // One attempt to write the leader key as it was last seen (absent:
  // `seen_rev_` 0) — the previous leader silent for takeover_after since
  // that write was seen (checked again here: a write seen since puts it
  // off), or `own` key of this coordinator after an outcome it could not
  // know — then to store the state under the next term and lead.
  void TryLead(bool own);
  // Rewrites the leader key; deposed when another wrote it.
  void Refresh();
  // Reads the leader key and the state, and follows (or leads again, when
  // the key is still this coordinator's).
  void Resync();
  // A successful write sent at `sent`: the leadership holds a while longer.
  void ExtendLocked(absl::Time sent);
  void OnLeaderKey(const std::optional<etcd::KeyValue>& kv);
  void OnStateKey(const std::optional<etcd::KeyValue>& kv);

  const std::unique_ptr<etcd::KvStore> client_;
  const EtcdStoreOptions options_;
  const Clock clock_;
  const std::string leader_key_;
  const std::string state_key_;
  const absl::Duration refresh_every_;
  const absl::Duration takeover_after_;
  Listener* listener_ = nullptr;

  // Serializes this coordinator's writes to etcd, so that each is
  // conditioned on the revisions of the one before.
  std::mutex write_mu_;
  // Serializes calls of the listener.
  std::mutex listener_mu_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool woken_ = false;
  bool started_ = false;
  bool stopping_ = false;
  bool leading_ = false;
  // The coordinator has taken the state it leads with (OnLead returned):
  // until then it must not act, though it may already commit.
  bool announced_ = false;
  // etcd's unreachability was logged.
  bool warned_ = false;
  // The last write was not answered (or refused): read etcd again before
  // anything else.
  bool resync_ = false;
  // The last refresh (or takeover) was sent then: the next is due
  // refresh_every later.
  absl::Time last_write_ = absl::InfinitePast();
  // A resync or takeover that failed is not tried again before then,
  // unless the leader key changes first.
  absl::Time retry_at_ = absl::InfinitePast();
  std::string my_value_;   // The leader key's value while this one leads.
  int64_t my_rev_ = 0;     // The leader key's revision this leader wrote last.
  int64_t state_rev_ = 0;  // The state key's revision it wrote or read last (0: absent).
  uint64_t term_ = 0;
  absl::Time renew_until_ = absl::InfinitePast();
  absl::Time order_until_ = absl::InfinitePast();
  // The leader key as last seen (value empty: absent), and when.
  std::string seen_value_;
  int64_t seen_rev_ = 0;
  absl::Time seen_at_ = absl::InfinitePast();

  std::unique_ptr<etcd::Watch> leader_watch_;
  std::unique_ptr<etcd::Watch> state_watch_;
  std::thread thread_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_ETCD_STATE_STORE_H_
