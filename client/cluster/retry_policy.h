// What the cluster client does with an operation that its group cannot
// serve at once, or whose attempt failed: retry it, park it, or fail it.
// Every accepted operation completes exactly once with its true outcome,
// so nothing is retried that could turn a success into a wrong definite
// answer; and a group that reconfigures is waited for rather than failed,
// since its copies agree again in about a lease.
#ifndef RKV_CLIENT_CLUSTER_RETRY_POLICY_H_
#define RKV_CLIENT_CLUSTER_RETRY_POLICY_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cluster/group_sessions.h"
#include "client/cluster/op_pool.h"

namespace rkv::client_internal {

// Whether `op`, whose attempt failed with `failure`, goes again (once, on
// a map fetched after the failure). A failure that may come from a stale
// map (the server restarted with a new rkey) is retried: a GET always, a
// write only if its first attempt cannot have taken effect. A write whose
// CAS went out may still take effect later (a claim left pending is
// committed by the next writer of the key that finds it), so a retry that
// succeeded would be followed by the first attempt's write.
bool MayRetry(const ClusterOp& op, const absl::Status& failure);

// Why `g`'s keys cannot be served now, so that their operations fail at
// once; OK when they can. Not for a reconfiguring group, whose operations
// wait for it.
absl::Status Serves(const Group& g);

// How long an operation waits for its group to finish reconfiguring, with
// the map's `lease`: making the copies agree takes about a lease once it
// began.
inline absl::Duration ParkingLimit(absl::Duration lease) { return 2 * lease; }
// The failure of an operation that waited that long.
absl::Status StillReconfiguring(absl::string_view group_id, absl::Duration lease);

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_RETRY_POLICY_H_
