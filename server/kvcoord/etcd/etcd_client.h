// A small client of etcd's v3 gRPC API (KV, Watch, Maintenance), for the
// coordinator's state. It speaks to one member at a time and moves on to
// the next when that member fails, is slow, or has no leader: every call
// has a deadline of its own (`EtcdOptions::call_timeout` per member tried,
// `EtcdOptions::total_timeout` in all), so that a caller left on a dead member
// waits a fraction of a second, not the seconds gRPC would. It starts at
// the member that answered last.
//
// What is retried on another member: a read (Get) after any failure that
// may be the member's alone (unreachable, no answer in time, no leader, a
// leader change); a transaction only when it surely did not take effect:
// the member could not be connected to, or it refused it for want of a
// leader before proposing it. A transaction that was sent and got no
// answer (DEADLINE_EXCEEDED), or whose connection broke on the way, is
// not retried: it may have been committed, and a retry whose compares were
// on revisions would then fail and hide that it had. The caller tells by
// reading the keys (a compare on a revision makes that possible).
//
// Calls carry etcd's "hasleader" metadata, so that a member cut off from
// its leader says so at once instead of holding a call until it times out.
// A thread of the client's own keeps a connection to every member (or a
// reconnection under way), so that a call finds out at once that a member
// is down and uses one that is back as soon as it is.
#ifndef RKV_SERVER_KVCOORD_ETCD_ETCD_CLIENT_H_
#define RKV_SERVER_KVCOORD_ETCD_ETCD_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/kvcoord/etcd/kv_store.h"

namespace rkv::server::etcd {

struct EtcdOptions {
  // host:port of every member's client URL.
  std::vector<std::string> endpoints;
  // A member that has not answered by then is left for the next.
  absl::Duration call_timeout = absl::Milliseconds(500);
  // All members together; UNAVAILABLE after that.
  absl::Duration total_timeout = absl::Seconds(2);
  // Client TLS (etcd's --client-cert-auth): PEM file paths; all empty:
  // plain text (loopback only). Without ca_file the system's roots are
  // trusted; cert_file and key_file go together.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

class StreamWatch;

// Thread-safe.
class EtcdClient final : public KvStore {
 public:
  // Fails on an empty endpoint list, a timeout that is not positive, or
  // unreadable TLS files; waits for no member (it connects in the
  // background).
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);
  // Takes up to 0.2 s to stop the thread that keeps the connections, which
  // the client's watches share: the last of them to go does that.
  ~EtcdClient() override;

  // The key's value, or nullopt when it does not exist; `revision`, if not
  // null, gets the store's revision at the read.
  absl::StatusOr<std::optional<KeyValue>> Get(const std::string& key,
                                              int64_t* revision = nullptr) override;
  // If every compare holds, puts every (key, value) and deletes every key
  // of `deletes`; otherwise changes nothing. UNAVAILABLE: it surely did
  // not take effect (no member took it). DEADLINE_EXCEEDED: unknown whether
  // it took effect (it was sent and no answer came): it is retried
  // on another member only when it surely did not (see the top of this
  // file). etcd refuses (INVALID_ARGUMENT) a key named twice in `puts` and
  // `deletes`.
  absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& compares,
                                const std::vector<std::pair<std::string, std::string>>& puts,
                                const std::vector<std::string>& deletes = {}) override;
  // Follows `key` from revision `from` (0: from now) on a thread of its own,
  // calling `on_change` with the key's new value (nullopt: deleted) for
  // every change, in order, each exactly once; it moves to another member
  // when its stream breaks, going on from the last revision it delivered.
  // `on_change` runs on the watch's thread. If the revisions it needs were
  // compacted it calls `on_change` once with the key as it is now (its
  // mod_revision as `revision`, or the store's revision if it is gone),
  // unless that is what it delivered last. A second thread asks the
  // stream's member for its status every `call_timeout` and leaves the
  // stream when the member stops answering: a member that hangs keeps its
  // connections open, and etcd's default --grpc-keepalive-min-time (5 s)
  // forbids the gRPC pings that would find out sooner. Destroying the
  // Watch stops it, not from `on_change`. The Watch may outlive the client.
  std::unique_ptr<Watch> WatchKey(const std::string& key, int64_t from,
                                  WatchCallback on_change) override;
  // Every member's status, in the order of `endpoints`, asked in parallel,
  // each within call_timeout.
  std::vector<MemberStatus> Status() override;

  const EtcdOptions& options() const { return options_; }

 private:
  struct Impl;
  explicit EtcdClient(EtcdOptions options);
  EtcdOptions options_;
  // Shared with the watches, which use its channels.
  std::shared_ptr<Impl> impl_;
  friend class StreamWatch;
};

// EtcdClient's watch: a stream of its own.
class StreamWatch final : public Watch {
 public:
  ~StreamWatch() override;  // Stops the stream and joins its thread; prompt.

 private:
  friend class EtcdClient;
  struct Impl;
  explicit StreamWatch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rkv::server::etcd

#endif  // RKV_SERVER_KVCOORD_ETCD_ETCD_CLIENT_H_
