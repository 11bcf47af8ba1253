#include "client/session/op_stats.h"

#include <bit>
#include <cstdint>

namespace rkv::client_internal {

OpOutcome OutcomeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return OpOutcome::kOk;
    case absl::StatusCode::kNotFound:
      return OpOutcome::kNotFound;
    case absl::StatusCode::kAlreadyExists:
      return OpOutcome::kAlreadyExists;
    case absl::StatusCode::kUnavailable:
      return OpOutcome::kUnavailable;
    default:
      return OpOutcome::kFailed;
  }
}

void OpStatsRecorder::Record(OpType type, const absl::Status& status, absl::Duration latency) {
  OpStats& s = stats_[static_cast<int>(type)];
  s.outcomes[static_cast<int>(OutcomeOf(status))]++;
  s.latency_sum += latency;
  // The first bucket whose bound, 2^i us, is at least the latency: the
  // bit width of (us - 1), a partial microsecond rounded up.
  const int64_t us = absl::ToInt64Microseconds(latency + absl::Nanoseconds(999));
  const int bucket = us <= 1 ? 0 : std::bit_width(static_cast<uint64_t>(us - 1));
  s.latency_buckets[bucket < kLatencyBuckets ? bucket : kLatencyBuckets - 1]++;
}

}  // namespace rkv::client_internal
