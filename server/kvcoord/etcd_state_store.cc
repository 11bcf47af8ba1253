#include "server/kvcoord/etcd_state_store.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace rkv::server {
namespace {

using etcd::Compare;

// The condition that `key` is as last seen: at revision `rev`, or absent.
Compare Unchanged(const std::string& key, int64_t rev) {
  if (rev == 0) return {key, Compare::Target::kCreateRevision, 0, ""};
  return {key, Compare::Target::kModRevision, rev, ""};
}

std::optional<proto::ClusterMap> ParseState(const std::optional<etcd::KeyValue>& kv) {
  if (!kv.has_value()) return std::nullopt;
  proto::ClusterMap map;
  if (!map.ParseFromString(kv->value)) {
    RKV_LOG(ERROR) << "etcd's " << kv->key << " is not a cluster map; ignored";
    return std::nullopt;
  }
  return map;
}

}  // namespace

EtcdStateStore::EtcdStateStore(std::unique_ptr<etcd::KvStore> client, EtcdStoreOptions options)
    : client_(std::move(client)),
      options_(std::move(options)),
      clock_(OrMonotonic(options_.clock)),
      leader_key_(options_.prefix + "/leader"),
      state_key_(options_.prefix + "/state"),
      refresh_every_(RefreshEvery(options_.lease)),
      takeover_after_(TakeoverAfter(options_.lease)) {}

EtcdStateStore::~EtcdStateStore() { Stop(); }

absl::Status EtcdStateStore::Start(Listener& listener) {
  listener_ = &listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    resync_ = true;  // Read etcd first.
    started_ = true;
  }
  if (options_.own_thread) thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void EtcdStateStore::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    WakeLocked();
  }
  if (thread_.joinable()) thread_.join();
  leader_watch_.reset();
  state_watch_.reset();
  std::lock_guard<std::mutex> write(write_mu_);
  int64_t rev = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leading_) rev = my_rev_;
    leading_ = false;
    announced_ = false;
  }
  // Handed on at once: a standby sees the key go and takes over without
  // waiting for this leadership to lapse (it has: nothing renews now).
  if (rev != 0) {
    absl::StatusOr<etcd::TxnResult> r =
        client_->Txn({Unchanged(leader_key_, rev)}, {}, {leader_key_});
    if (r.ok() && r->succeeded) RKV_LOG(INFO) << "handed the leadership on";
  }
}

const char* EtcdStateStore::ActionName(Action action) {
  switch (action) {
    case Action::kNone:
      return "none";
    case Action::kResync:
      return "resync";
    case Action::kRefresh:
      return "refresh";
    case Action::kTakeOver:
      return "take over";
  }
  return "?";
}

EtcdStateStore::Action EtcdStateStore::Due(absl::Time* next) {
  absl::Time unused;
  if (next == nullptr) next = &unused;
  *next = absl::InfiniteFuture();
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_ || stopping_) return Action::kNone;
  const absl::Time now = clock_();
  if (resync_) {
    // Not read (etcd unreachable): again soon.
    if (now < retry_at_) {
      *next = retry_at_;
      return Action::kNone;
    }
    return Action::kResync;
  }
  if (leading_) {
    *next = last_write_ + refresh_every_;
    if (now < *next) return Action::kNone;
    *next = absl::InfiniteFuture();
    return Action::kRefresh;
  }
  // A key that is gone is taken at once; a leader is given takeover_after
  // of silence. Lost the race, or etcd did not answer: not again at once.
  *next =
      std::max(retry_at_, seen_value_.empty() ? absl::InfinitePast() : seen_at_ + takeover_after_);
  if (now < *next) return Action::kNone;
  *next = absl::InfiniteFuture();
  return Action::kTakeOver;
}

void EtcdStateStore::Do(Action action) {
  switch (action) {
    case Action::kNone:
      return;
    case Action::kResync: {
      Resync();
      std::lock_guard<std::mutex> lock(mu_);
      if (resync_) retry_at_ = clock_() + refresh_every_;
      return;
    }
    case Action::kRefresh:
      Refresh();
      return;
    case Action::kTakeOver: {
      TryLead(/*own=*/false);
      std::lock_guard<std::mutex> lock(mu_);
      last_write_ = clock_();
      if (!leading_) retry_at_ = clock_() + refresh_every_;
      return;
    }
  }
}

void EtcdStateStore::Run() {
  for (;;) {
    absl::Time next;
    const Action action = Due(&next);
    if (action != Action::kNone) {
      Do(action);
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) return;
    // Woken between Due and here: look again at once.
    if (woken_) {
      woken_ = false;
      continue;
    }
    // `next` is on the store's clock, which need not be the one the
    // condition variable waits on: never more than a refresh, after which
    // Due looks again.
    const absl::Duration wait = std::clamp(next - clock_(), absl::ZeroDuration(), refresh_every_);
    wake_.wait_for(lock, absl::ToChronoNanoseconds(wait), [this] { return stopping_ || woken_; });
    woken_ = false;
  }
}

void EtcdStateStore::WakeLocked() {
  woken_ = true;
  wake_.notify_all();
}

void EtcdStateStore::ExtendLocked(absl::Time sent) {
  order_until_ = std::max(order_until_, sent + Margin(takeover_after_) - InFlight(options_.lease));
  renew_until_ = std::max(renew_until_, sent + Margin(takeover_after_ + options_.lease / 4));
}

void EtcdStateStore::TryLead(bool own) {
  std::unique_lock<std::mutex> write(write_mu_);
  int64_t expected;
  {
    // The revision and the silence since it are taken together: a write
    // seen after Run decided to take over puts the takeover off.
    std::lock_guard<std::mutex> lock(mu_);
    // Decided before this store led again or found it must read etcd.
    if (!own && (leading_ || resync_ || stopping_)) return;
    if (!own && !seen_value_.empty() && clock_() < seen_at_ + takeover_after_) return;
    expected = seen_value_.empty() ? 0 : seen_rev_;
  }
  std::random_device rd;
  const std::string value = absl::StrCat(options_.id, " ", options_.address, " ",
                                         absl::Hex((uint64_t{rd()} << 32) | rd()));
  absl::StatusOr<etcd::TxnResult> r =
      client_->Txn({Unchanged(leader_key_, expected)}, {{leader_key_, value}});
  if (!r.ok()) return;
  if (!r->succeeded) {
    // Another leads (or wrote the key since): follow it from what it is.
    absl::StatusOr<std::optional<etcd::KeyValue>> kv = client_->Get(leader_key_);
    if (kv.ok()) OnLeaderKey(*kv);
    return;
  }
  const int64_t lead_rev = r->revision;
  absl::StatusOr<std::optional<etcd::KeyValue>> stored = client_->Get(state_key_);
  if (!stored.ok()) return;  // The key is this one's; tried again once it lapses.
  proto::ClusterMap state;
  if (std::optional<proto::ClusterMap> s = ParseState(*stored)) {
    state = *std::move(s);
  } else if (stored->has_value()) {
    // Starting afresh would forget every registration and replica group:
    // no coordinator leads until an operator has looked.
    RKV_LOG(ERROR) << "etcd's " << state_key_ << " is not a cluster map; not leading";
    (void)client_->Txn({Unchanged(leader_key_, lead_rev)}, {}, {leader_key_});
    return;
  } else if (options_.import.epoch() != 0) {
    state = options_.import;
    RKV_LOG(INFO) << "etcd holds no state under " << options_.prefix
                  << ": starting from the imported one (epoch " << state.epoch() << ")";
  }
  state.set_term(state.term() + 1);
  std::string bytes;
  state.SerializeToString(&bytes);
  const absl::Time sent = clock_();
  r = client_->Txn({Unchanged(leader_key_, lead_rev),
                    Unchanged(state_key_, stored->has_value() ? (*stored)->mod_revision : 0)},
                   {{leader_key_, value}, {state_key_, bytes}});
  if (!r.ok() || !r->succeeded) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leading_ = true;
    announced_ = false;
    my_value_ = value;
    my_rev_ = r->revision;
    state_rev_ = r->revision;
    term_ = state.term();
    order_until_ = renew_until_ = absl::InfinitePast();
    ExtendLocked(sent);
  }
  write.unlock();
  std::lock_guard<std::mutex> calls(listener_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!leading_) return;  // Deposed already (a Commit refused).
  }
  RKV_LOG(INFO) << "coordinator " << options_.id << " leads (term " << state.term() << ")";
  listener_->OnLead(state);
  std::lock_guard<std::mutex> lock(mu_);
  announced_ = leading_;
}

void EtcdStateStore::Refresh() {
  std::lock_guard<std::mutex> write(write_mu_);
  int64_t expected;
  std::string value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!leading_) return;
    expected = my_rev_;
    value = my_value_;
    last_write_ = clock_();
  }
  const absl::Time sent = clock_();
  absl::StatusOr<etcd::TxnResult> r =
      client_->Txn({Unchanged(leader_key_, expected)}, {{leader_key_, value}});
  std::lock_guard<std::mutex> lock(mu_);
  if (!r.ok()) {
    if (sent >= order_until_ && !warned_) {
      RKV_LOG(WARNING) << "cannot reach etcd (" << r.status().message()
                       << "): no changes, and no lease renewals once the leadership lapses";
      warned_ = true;
    }
    return;
  }
  if (warned_) RKV_LOG(INFO) << "etcd reachable again";
  warned_ = false;
  if (r->succeeded) {
    my_rev_ = r->revision;
    ExtendLocked(sent);
    return;
  }
  // Another coordinator wrote the key (or a write of this one whose answer
  // was lost did): read what stands.
  leading_ = false;
  announced_ = false;
  resync_ = true;
}

void EtcdStateStore::Resync() {
  int64_t rev = 0;
  absl::StatusOr<std::optional<etcd::KeyValue>> leader = client_->Get(leader_key_, &rev);
  if (!leader.ok()) return;
  absl::StatusOr<std::optional<etcd::KeyValue>> stored = client_->Get(state_key_);
  if (!stored.ok()) return;
  if (leader_watch_ == nullptr) {
    leader_watch_ = client_->WatchKey(
        leader_key_, rev + 1,
        [this](const std::optional<etcd::KeyValue>& kv, int64_t) { OnLeaderKey(kv); });
    state_watch_ = client_->WatchKey(
        state_key_, rev + 1,
        [this](const std::optional<etcd::KeyValue>& kv, int64_t) { OnStateKey(kv); });
  }
  OnLeaderKey(*leader);
  bool mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    resync_ = false;
    mine = leader->has_value() && !my_value_.empty() && (*leader)->value == my_value_;
    leading_ = false;
    announced_ = false;
  }
  // Still this coordinator's (a write whose answer was lost): it leads
  // again, from the state as stored, under the next term.
  if (mine) {
    TryLead(/*own=*/true);
    return;
  }
  OnStateKey(*stored);
}

void EtcdStateStore::OnLeaderKey(const std::optional<etcd::KeyValue>& kv) {
  std::lock_guard<std::mutex> lock(mu_);
  seen_value_ = kv.has_value() ? kv->value : "";
  seen_rev_ = kv.has_value() ? kv->mod_revision : 0;
  seen_at_ = clock_();
  // A change: a takeover or resync put off by a failure is tried again
  // now (a key gone is taken at once).
  retry_at_ = absl::InfinitePast();
  WakeLocked();
}

void EtcdStateStore::OnStateKey(const std::optional<etcd::KeyValue>& kv) {
  std::optional<proto::ClusterMap> state = ParseState(kv);
  if (!state.has_value()) return;
  std::lock_guard<std::mutex> calls(listener_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leading_ || stopping_) return;  // Its own write.
  }
  listener_->OnFollow(*state);
}

absl::Status EtcdStateStore::Commit(const proto::ClusterMap& state) {
  std::lock_guard<std::mutex> write(write_mu_);
  int64_t leader_rev, state_rev;
  std::string value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Of this leadership only: a state built under an earlier one of this
    // coordinator (before an unknown outcome made it lead again) would
    // undo what it stored since.
    if (!leading_ || state.term() != term_) {
      return absl::FailedPreconditionError("this coordinator does not lead");
    }
    leader_rev = my_rev_;
    state_rev = state_rev_;
    value = my_value_;
  }
  std::string bytes;
  state.SerializeToString(&bytes);
  const absl::Time sent = clock_();
  absl::StatusOr<etcd::TxnResult> r =
      client_->Txn({Unchanged(leader_key_, leader_rev), Unchanged(state_key_, state_rev)},
                   {{leader_key_, value}, {state_key_, bytes}});
  std::lock_guard<std::mutex> lock(mu_);
  if (r.ok() && r->succeeded) {
    my_rev_ = state_rev_ = r->revision;
    ExtendLocked(sent);
    return absl::OkStatus();
  }
  // Surely not stored (no member could take it): only this change is
  // refused; the leadership stands on its last write.
  if (!r.ok() && r.status().code() == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(absl::StrCat("etcd: ", r.status().message()));
  }
  // Refused (another leads) or not answered (it may have been stored):
  // this coordinator acts no more until it has read etcd again.
  leading_ = false;
  announced_ = false;
  resync_ = true;
  WakeLocked();
  if (r.ok()) return absl::FailedPreconditionError("another coordinator leads");
  return absl::UnavailableError(absl::StrCat("etcd: ", r.status().message()));
}

Leadership EtcdStateStore::leadership() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!announced_) return {term_, absl::InfinitePast(), absl::InfinitePast()};
  return {term_, renew_until_, order_until_};
}

bool EtcdStateStore::Current() const {
  // A leader's writes, or a standby's view of them: the leader rewrites
  // its key every refresh_every, so a standby that saw nothing for a lease
  // is cut off from etcd (or no one leads) and its map may be old.
  std::lock_guard<std::mutex> lock(mu_);
  if (announced_) return clock_() < renew_until_;
  return clock_() < seen_at_ + options_.lease;
}

std::string EtcdStateStore::LeaderAddress() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> parts = absl::StrSplit(seen_value_, ' ');
  return parts.size() == 3 ? parts[1] : "";
}

StoreDescription EtcdStateStore::Describe() const {
  StoreDescription d{"etcd", LeaderAddress(), {}};
  for (const etcd::MemberStatus& m : client_->Status()) {
    proto::StoreMember& p = d.members.emplace_back();
    p.set_endpoint(m.endpoint);
    p.set_healthy(m.status.ok() && m.leader_id != 0);
    p.set_leader(m.is_leader());
    if (!m.status.ok()) p.set_error(std::string(m.status.message()));
  }
  return d;
}

}  // namespace rkv::server
