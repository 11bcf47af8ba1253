// What the cluster client needs of its session with one replica group:
// hand it an operation with the callback that completes it, poll it, and
// know what it still holds and what its operations cost. The cluster
// client reaches its sessions through this alone, not through the public
// rkv::Client: that is the application's surface, and a session is a part
// the cluster client composes — one that a test or the simulation may give
// it in another form — not another client it calls back.
//
// Closing a session (destroying it) completes what it still holds with
// Cancelled; a cluster client that means every operation to finish on its
// own drains a session first: it polls it until in_flight() is zero.
#ifndef RKV_CLIENT_REGION_REGION_SESSION_H_
#define RKV_CLIENT_REGION_REGION_SESSION_H_

#include <cstddef>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rkv/client.h"

namespace rkv::client_internal {

class RegionSession {
 public:
  virtual ~RegionSession() = default;

  // Accepts an operation of `type` on `key` (with `value` for a write).
  // Exactly one of the callbacks is set, the one `type` calls for; it runs
  // exactly once, inside a later Poll() or as the session closes, never
  // inside Submit.
  virtual void Submit(OpType type, absl::string_view key, absl::string_view value,
                      Client::GetCallback on_get, Client::DoneCallback on_done) = 0;
  // Runs the session's rounds; waits up to `timeout` for one to complete
  // when nothing did. Returns the operations whose callbacks ran.
  virtual size_t Poll(absl::Duration timeout) = 0;
  // Operations accepted whose callbacks have not run.
  virtual size_t in_flight() const = 0;
  // What its finished operations of `type` cost.
  virtual OpCosts costs(OpType type) const = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_REGION_REGION_SESSION_H_
