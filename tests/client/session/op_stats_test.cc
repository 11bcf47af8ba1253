// The client's own counters (rkv::OpStats): each outcome by its status,
// and each latency in the first bucket whose bound holds it.
#include "client/session/op_stats.h"

#include "gtest/gtest.h"

namespace rkv::client_internal {
namespace {

TEST(OpStatsTest, EachStatusCountsAsItsOutcomeForItsType) {
  OpStatsRecorder r;
  r.Record(OpType::kGet, absl::OkStatus(), absl::Microseconds(3));
  r.Record(OpType::kGet, absl::NotFoundError("absent"), absl::Microseconds(3));
  r.Record(OpType::kInsert, absl::AlreadyExistsError("present"), absl::Microseconds(3));
  r.Record(OpType::kPut, absl::UnavailableError("outcome unknown"), absl::Microseconds(3));
  r.Record(OpType::kPut, absl::InvalidArgumentError("key of 0 bytes"), absl::Microseconds(3));
  r.Record(OpType::kPut, absl::CancelledError("closed"), absl::Microseconds(3));
  const OpStats& get = r.stats(OpType::kGet);
  EXPECT_EQ(get.outcomes[static_cast<int>(OpOutcome::kOk)], 1u);
  EXPECT_EQ(get.outcomes[static_cast<int>(OpOutcome::kNotFound)], 1u);
  EXPECT_EQ(r.stats(OpType::kInsert).outcomes[static_cast<int>(OpOutcome::kAlreadyExists)], 1u);
  const OpStats& put = r.stats(OpType::kPut);
  EXPECT_EQ(put.outcomes[static_cast<int>(OpOutcome::kUnavailable)], 1u);
  EXPECT_EQ(put.outcomes[static_cast<int>(OpOutcome::kFailed)], 2u);
  EXPECT_EQ(put.outcomes[static_cast<int>(OpOutcome::kOk)], 0u);
  EXPECT_EQ(put.latency_sum, absl::Microseconds(9));
  for (uint64_t n : r.stats(OpType::kDelete).outcomes) EXPECT_EQ(n, 0u);
}

TEST(OpStatsTest, ALatencyLandsInTheFirstBucketWhoseBoundHoldsIt) {
  struct Case {
    absl::Duration latency;
    int bucket;
  };
  const Case cases[] = {
      {absl::ZeroDuration(), 0},
      {absl::Nanoseconds(400), 0},
      {absl::Microseconds(1), 0},
      {absl::Nanoseconds(1001), 1},
      {absl::Microseconds(2), 1},
      {absl::Microseconds(3), 2},
      {absl::Microseconds(4), 2},
      {absl::Microseconds(5), 3},
      {absl::Microseconds(1000), 10},
      {absl::Microseconds(1025), 11},
      {absl::Seconds(4), 22},
      {absl::Seconds(5), kLatencyBuckets - 1},
      {absl::Hours(1), kLatencyBuckets - 1},
  };
  for (const Case& c : cases) {
    OpStatsRecorder r;
    r.Record(OpType::kGet, absl::OkStatus(), c.latency);
    const OpStats& s = r.stats(OpType::kGet);
    for (int i = 0; i < kLatencyBuckets; ++i) {
      EXPECT_EQ(s.latency_buckets[i], i == c.bucket ? 1u : 0u)
          << absl::FormatDuration(c.latency) << " in bucket " << i;
    }
    EXPECT_LE(c.latency, LatencyBucketBound(c.bucket)) << absl::FormatDuration(c.latency);
    if (c.bucket > 0) {
      EXPECT_GT(c.latency, LatencyBucketBound(c.bucket - 1));
    }
  }
  EXPECT_EQ(LatencyBucketBound(0), absl::Microseconds(1));
  EXPECT_EQ(LatencyBucketBound(kLatencyBuckets - 2), absl::Microseconds(1 << 22));
  EXPECT_EQ(LatencyBucketBound(kLatencyBuckets - 1), absl::InfiniteDuration());
}

}  // namespace
}  // namespace rkv::client_internal
