// A clock that never jumps, for leases: the time between two readings on
// one machine. The wall clock (absl::Now) steps when NTP or an operator sets
// it, and a lease measured on it could run out at once or last until the
// clock catches up — a server serving on after its group was given away.
//
// Every lease, deadline, timeout, parking limit, grace period, rate limit
// and retry interval reads a `Clock` passed in, as LevelDB passes `Env`:
// the machine's monotonic clock in production, a simulated one under the
// deterministic simulation, which must be able to run a node fast or slow.
// The wall clock is read only for logs, generation stamps and the
// deadlines handed to gRPC.
#ifndef RKV_COMMON_MONOTONIC_CLOCK_H_
#define RKV_COMMON_MONOTONIC_CLOCK_H_

#include <chrono>
#include <functional>

#include "absl/time/time.h"

namespace rkv {

// An absl::Time only for its arithmetic: its epoch is the machine's boot,
// not 1970, so it is never shown as a date nor compared with absl::Now().
inline absl::Time MonotonicNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

// A monotonic time source. Copies share whatever the source reads.
using Clock = std::function<absl::Time()>;

// `clock`, or the machine's monotonic clock when it is empty: what an
// option left unset means.
inline Clock OrMonotonic(Clock clock) { return clock ? std::move(clock) : Clock(&MonotonicNow); }

}  // namespace rkv

#endif  // RKV_COMMON_MONOTONIC_CLOCK_H_
