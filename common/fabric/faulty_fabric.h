// Fault injection as a fabric: InjectFaults wraps any backend (soft, the
// simulation or verbs) so that the requests its queue pairs post are
// delayed, fail, or break their connection, each decided per request from a
// seeded generator. Nothing about faults lives in the backends or their
// wire formats; a program or test that wants faults wraps its fabric.
#ifndef RKV_COMMON_FABRIC_FAULTY_FABRIC_H_
#define RKV_COMMON_FABRIC_FAULTY_FABRIC_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/fabric/fabric.h"
#include "common/monotonic_clock.h"

namespace rkv::fabric {

struct FaultOptions {
  uint64_t seed = 1;
  // Hold the request (and, to keep the queue pair's order, every request
  // after it) for up to `max_delay` before it goes to the target.
  double delay_probability = 0;
  absl::Duration max_delay = absl::Milliseconds(2);
  // Break the connection: this request and all outstanding ones fail.
  double drop_probability = 0;
  // Fail one request with kRetryExceeded; it may or may not have executed
  // at the target, just as when an acknowledgement is lost on hardware.
  double fail_probability = 0;

  bool any() const { return delay_probability > 0 || drop_probability > 0 || fail_probability > 0; }
};

// Parses "delay=0.01,drop=0.001,fail=0.001,max_delay=2ms,seed=7" (any
// subset, in any order; "" is no faults).
absl::StatusOr<FaultOptions> ParseFaultOptions(absl::string_view text);

// A fabric whose queue pairs inject `faults` into what they post; memory
// registration and listening pass through. Each queue pair draws from its
// own generator, seeded from `faults.seed` and the order of connects.
// Delays are measured on `clock` (the machine's monotonic clock when
// unset); the simulation passes one that advances as it runs, so that runs
// replay.
std::unique_ptr<Fabric> InjectFaults(std::unique_ptr<Fabric> fabric, const FaultOptions& faults,
                                     Clock clock = {});

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_FAULTY_FABRIC_H_
