// Counts what a client's operations came to (rkv::OpStats): each outcome,
// and latency from the call to the callback in the public header's buckets.
// Kept by the layer that runs the callbacks the user gave.
#ifndef RKV_CLIENT_SESSION_OP_STATS_H_
#define RKV_CLIENT_SESSION_OP_STATS_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rkv/client.h"

namespace rkv::client_internal {

OpOutcome OutcomeOf(const absl::Status& status);

class OpStatsRecorder {
 public:
  void Record(OpType type, const absl::Status& status, absl::Duration latency);
  const OpStats& stats(OpType type) const { return stats_[static_cast<int>(type)]; }

 private:
  OpStats stats_[kOpTypes];
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SESSION_OP_STATS_H_
