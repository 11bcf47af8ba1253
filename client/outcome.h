// Whether a failed operation may have taken effect. An operation that
// failed before it posted any CAS changed nothing a reader can see, so a
// retry is safe even for INSERT and DELETE; after one, its outcome is
// unknown, and a retry could answer AlreadyExists or NotFound for its own
// first attempt.
#ifndef RKV_CLIENT_OUTCOME_H_
#define RKV_CLIENT_OUTCOME_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace rkv::client_internal {

inline constexpr char kOutcomeUnknown[] = "rkv/outcome-unknown";

inline absl::Status WithUnknownOutcome(absl::Status status) {
  status.SetPayload(kOutcomeUnknown, absl::Cord("may have executed"));
  return status;
}

inline bool OutcomeUnknown(const absl::Status& status) {
  return status.GetPayload(kOutcomeUnknown).has_value();
}

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_OUTCOME_H_
