// A client session's lease on every copy of its region
// (common/layout/region_format.h, "Client sessions"). The session claims an
// entry in each copy's session table when it connects, under the id its
// queue pairs carry, and renews it from the event loop every quarter lease.
// The server fences a session whose lease lapsed before anything it held
// can go to anyone else; the client, for its part, takes a new session
// rather than post anything while its lease is in doubt.
#ifndef RKV_CLIENT_REGION_SESSION_LEASE_H_
#define RKV_CLIENT_REGION_SESSION_LEASE_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/protocol/op_rounds.h"
#include "client/region/region_copies.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"
#include "common/layout/region_format.h"
#include "common/random.h"

namespace rkv::client_internal {

class SessionLease {
 public:
  // A random session id, never 0: a fabric peer id (QueuePairOptions).
  static uint64_t NewId(Rng& rng);

  SessionLease() = default;

  // Claims an entry of every copy's session table (RegionCopies::header)
  // for session `id`, whose queue pairs `copies` has just connected (round
  // trips of its own, at connect time). Holds no lease when a copy names no
  // session table (a server of an older build). ResourceExhausted when a
  // copy's table is full.
  absl::Status Claim(Session& session, RegionCopies& copies, uint64_t id, absl::Time now);
  bool held() const { return lease_ > absl::ZeroDuration(); }
  uint64_t id() const { return id_; }
  absl::Duration lease() const { return lease_; }

  // Adds a renewal to `rounds` (a WRITE to every copy) when one is due and
  // none is in flight; true when it did. `often`: one is due every few
  // milliseconds (while a heap census is under way, whose phases the
  // renewals read).
  bool MaybeRenew(absl::Time now, OpRounds& rounds, bool often = false);
  // The renewal round completed: the lease runs from when it was posted.
  void OnRenewed();
  // The renewal in flight is lost with its queue pairs.
  void OnLost() { in_flight_ = false; }
  // No renewal posted in the last half lease has landed: the server may
  // have fenced the session (a process paused, or an idle one that did not
  // poll). Nothing but a renewal should be posted until one lands.
  bool InDoubt(absl::Time now) const {
    return held() && (now < renewed_ || now - renewed_ >= lease_ / 2);
  }

  // Counts the session in every copy's departures (round trips of its
  // own), before a close hands its heap back: a census round under way
  // may have walked the free pool already.
  void Depart(Session& session, RegionCopies& copies);
  // Empties the entries (round trips of its own): the session closes.
  void Release(Session& session, RegionCopies& copies);

  // Where a copy keeps this session's entry.
  struct Entry {
    uint64_t owner_addr = 0;
    uint32_t rkey = 0;
  };
  const Entry& entry(int r) const { return entry_[r]; }
  int copies() const { return copies_; }

 private:
  absl::Status ClaimOn(Session& session, RegionCopies& copies, int r);
  // Empties the entries claimed so far.
  void Empty(Session& session, RegionCopies& copies);

  uint64_t id_ = 0;
  absl::Duration lease_;                     // The shortest of the copies'; zero: none held.
  std::array<Entry, kMaxReplicas> entry_{};  // Per copy.
  int copies_ = 0;
  ScratchBuffer word_;  // What a renewal writes.
  uint64_t renewal_ = 0;
  absl::Time posted_;   // Of the renewal in flight.
  absl::Time renewed_;  // When the last renewal that landed was posted.
  bool in_flight_ = false;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_REGION_SESSION_LEASE_H_
