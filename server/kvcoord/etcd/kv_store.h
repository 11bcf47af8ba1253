// What the coordinators' state store (etcd_state_store.h) needs of etcd: a
// read, a transaction of compares and puts, a watch of one key. The real
// client (etcd_client.h) implements it over etcd's gRPC API; the
// deterministic simulation implements it over a simulated etcd
// (tests/server/kvcoord/sim_etcd.h), so that the store's leadership runs
// for real on top of either. The contracts below are etcd's own as the
// real client exposes them, and a simulation must keep to them: the
// store's safety rests on them, above all on the outcome-unknown answer of
// a transaction.
#ifndef RKV_SERVER_KVCOORD_ETCD_KV_STORE_H_
#define RKV_SERVER_KVCOORD_ETCD_KV_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rkv::server::etcd {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
};

// One condition of a transaction.
struct Compare {
  enum class Target { kModRevision, kCreateRevision, kValue };
  std::string key;
  Target target = Target::kModRevision;
  // kModRevision, kCreateRevision: equal to this (0: the key does not exist).
  int64_t revision = 0;
  // kValue: equal to this.
  std::string value;
};

struct TxnResult {
  bool succeeded = false;
  // The store's revision after the transaction (the revision of its puts
  // when it succeeded).
  int64_t revision = 0;
};

// How one member answered a status call.
struct MemberStatus {
  std::string endpoint;
  absl::Status status;  // Not OK: unreachable, or it answered with an error.
  uint64_t member_id = 0;
  uint64_t leader_id = 0;  // 0: the member knows no leader.
  uint64_t raft_term = 0;
  int64_t db_size = 0;
  bool is_leader() const { return status.ok() && member_id != 0 && member_id == leader_id; }
};

// A key followed; destroying it stops the deliveries (not from inside one).
class Watch {
 public:
  virtual ~Watch() = default;

 protected:
  Watch() = default;
};

using WatchCallback = std::function<void(const std::optional<KeyValue>& kv, int64_t revision)>;

// Thread-safe.
class KvStore {
 public:
  virtual ~KvStore() = default;

  // The key's value, or nullopt when it does not exist; `revision`, if not
  // null, gets the store's revision at the read.
  virtual absl::StatusOr<std::optional<KeyValue>> Get(const std::string& key,
                                                      int64_t* revision = nullptr) = 0;
  // If every compare holds, puts every (key, value) and deletes every key
  // of `deletes`, all at one new revision; otherwise changes nothing.
  // UNAVAILABLE: it surely did not take effect. DEADLINE_EXCEEDED: unknown
  // whether it took effect — it was sent and no answer came, and it may
  // even take effect later (a proposal committed once etcd has a quorum
  // again). The caller tells by reading the keys (a compare on a revision
  // makes that possible). A key named twice in `puts` and `deletes` is
  // INVALID_ARGUMENT.
  virtual absl::StatusOr<TxnResult> Txn(
      const std::vector<Compare>& compares,
      const std::vector<std::pair<std::string, std::string>>& puts,
      const std::vector<std::string>& deletes = {}) = 0;
  // Follows `key` from revision `from` (0: from now), calling `on_change`
  // with the key's new value (nullopt: deleted) and the change's revision
  // for every change, in order, each exactly once, however often the
  // stream under it breaks. `on_change` runs on a thread that is not the
  // caller's, at any moment (under the simulation: whenever it delivers).
  // If the revisions it needs were compacted it calls `on_change` once
  // with the key as it is now, unless that is what it delivered last.
  virtual std::unique_ptr<Watch> WatchKey(const std::string& key, int64_t from,
                                          WatchCallback on_change) = 0;
  // Every member's status, for kvctl status.
  virtual std::vector<MemberStatus> Status() = 0;
};

}  // namespace rkv::server::etcd

#endif  // RKV_SERVER_KVCOORD_ETCD_KV_STORE_H_
