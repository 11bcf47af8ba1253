// Whether a failed operation may have taken effect. An operation that
// failed before it posted any CAS changed nothing a reader can see, so a
// retry is safe; after one, its outcome is unknown — it may take effect
// even later (docs/RELIABILITY.md) — and a retry could be followed by its
// own first attempt. The mark is a payload, for code, and words in the
// message, for people.
#ifndef RKV_CLIENT_PROTOCOL_OUTCOME_H_
#define RKV_CLIENT_PROTOCOL_OUTCOME_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rkv::client_internal {

inline constexpr char kOutcomeUnknown[] = "rkv/outcome-unknown";

inline bool OutcomeUnknown(const absl::Status& status) {
  return status.GetPayload(kOutcomeUnknown).has_value();
}

inline absl::Status WithUnknownOutcome(absl::Status status) {
  if (status.ok() || OutcomeUnknown(status)) return status;
  absl::Status marked(status.code(),
                      absl::StrCat(status.message(),
                                   " (outcome unknown: the write may take effect, now or later)"));
  status.ForEachPayload([&marked](absl::string_view url, const absl::Cord& payload) {
    marked.SetPayload(url, payload);
  });
  marked.SetPayload(kOutcomeUnknown, absl::Cord("may have executed"));
  return marked;
}

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_OUTCOME_H_
