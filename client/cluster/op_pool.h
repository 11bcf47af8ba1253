// The cluster client's record of an operation, from the call to its
// callback, across retries and parking; and the pool that reuses them.
// Records are reused (their strings keep their capacity), so that an
// operation costs no allocation in the cluster client once the pool has
// grown to the number in flight. A session's callback names its record by
// pointer and takes ownership back when it runs (exactly once).
#ifndef RKV_CLIENT_CLUSTER_OP_POOL_H_
#define RKV_CLIENT_CLUSTER_OP_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/session/op_stats.h"
#include "rkv/client.h"

namespace rkv::client_internal {

struct ClusterOp {
  OpType type;
  std::string key, value;
  Client::GetCallback on_get;
  Client::DoneCallback on_done;
  bool retried = false;
  uint64_t needs_fetch = 0;  // A retry waits for this map fetch to end.
  // Parked while its group reconfigures: failed if it does not serve by then.
  absl::Time park_until = absl::InfiniteFuture();
  absl::Time started;  // When the caller submitted it (MonotonicNow).
};
using OpPtr = std::unique_ptr<ClusterOp>;

class OpPool {
 public:
  // Keeps up to `max_idle` records for reuse.
  explicit OpPool(size_t max_idle) : max_idle_(max_idle) {}

  OpPtr New(OpType type, absl::string_view key, absl::string_view value, Client::GetCallback on_get,
            Client::DoneCallback on_done);

  struct Callbacks {
    Client::GetCallback on_get;
    Client::DoneCallback on_done;
  };
  // Takes `op` back, counts it as finished with `status`, and hands over
  // its callbacks. The record goes back first, so that a callback that
  // starts another operation may reuse it.
  Callbacks Release(OpPtr op, const absl::Status& status);

  // The operations released so far.
  const OpStats& stats(OpType type) const { return stats_.stats(type); }

 private:
  const size_t max_idle_;
  std::vector<OpPtr> idle_;
  OpStatsRecorder stats_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_OP_POOL_H_
