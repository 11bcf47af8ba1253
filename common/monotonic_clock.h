// A clock that never jumps, for leases: the time between two readings on
// one machine. The wall clock (absl::Now) steps when NTP or an operator sets
// it, and a lease measured on it could run out at once or last until the
// clock catches up — a server serving on after its group was given away.
#ifndef RKV_COMMON_MONOTONIC_CLOCK_H_
#define RKV_COMMON_MONOTONIC_CLOCK_H_

#include <chrono>

#include "absl/time/time.h"

namespace rkv {

// An absl::Time only for its arithmetic: its epoch is the machine's boot,
// not 1970, so it is never shown as a date nor compared with absl::Now().
inline absl::Time MonotonicNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace rkv

#endif  // RKV_COMMON_MONOTONIC_CLOCK_H_
