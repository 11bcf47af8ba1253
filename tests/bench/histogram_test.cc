// kvbench's histogram against exact percentiles of the same values.
#include "bench/kvbench/histogram.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/random.h"
#include "gtest/gtest.h"

namespace rkv::bench {
namespace {

TEST(HistogramTest, BucketsTileTheRangeWithBoundedWidth) {
  int last = -1;
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{255}, uint64_t{256}, uint64_t{257},
                     uint64_t{1000}, uint64_t{123456789}, uint64_t{1} << 40, UINT64_MAX}) {
    const int b = Histogram::BucketOf(v);
    EXPECT_LE(Histogram::BucketLow(b), v);
    EXPECT_GE(Histogram::BucketHigh(b), v);
    EXPECT_GE(b, last);
    last = b;
    // Half a bucket is at most 1/256 of the values in it.
    const double half = (Histogram::BucketHigh(b) - Histogram::BucketLow(b) + 1) / 2.0;
    EXPECT_LE(half, std::max(1.0, Histogram::BucketLow(b) / 256.0)) << v;
  }
  // Adjacent buckets meet.
  for (int b = 0; b < 2000; ++b) {
    EXPECT_EQ(Histogram::BucketHigh(b) + 1, Histogram::BucketLow(b + 1)) << b;
  }
}

TEST(HistogramTest, PercentilesWithinOnePercentOfExact) {
  Rng rng(42);
  for (int trial = 0; trial < 3; ++trial) {
    Histogram h;
    std::vector<uint64_t> values;
    for (int i = 0; i < 200000; ++i) {
      // Log-uniform from 1 us to 10 s, in nanoseconds, like latencies.
      const uint64_t v = static_cast<uint64_t>(std::pow(10.0, 3 + 7 * rng.NextDouble()));
      values.push_back(v);
      h.Record(v);
    }
    std::sort(values.begin(), values.end());
    for (double p : {1.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
      const size_t rank = static_cast<size_t>(std::ceil(p / 100 * values.size()));
      const double exact = static_cast<double>(values[std::max<size_t>(rank, 1) - 1]);
      EXPECT_NEAR(static_cast<double>(h.Percentile(p)), exact, exact * 0.01) << "p" << p;
    }
    EXPECT_EQ(h.count(), values.size());
    EXPECT_EQ(h.min(), values.front());
    EXPECT_EQ(h.max(), values.back());
  }
}

TEST(HistogramTest, MergingEqualsRecordingEverythingInOne) {
  Rng rng(7);
  Histogram a, b, all;
  for (int i = 0; i < 50000; ++i) {
    const uint64_t v = rng.Uniform(1'000'000);
    (i % 3 ? a : b).Record(v);
    all.Record(v);
  }
  Histogram merged;
  merged.Merge(a);
  merged.Merge(b);
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.max(), all.max());
  EXPECT_DOUBLE_EQ(merged.mean(), all.mean());
  for (double p : {50.0, 99.0, 99.9}) EXPECT_EQ(merged.Percentile(p), all.Percentile(p));
}

TEST(HistogramTest, EmptyAndSingleValue) {
  Histogram h;
  EXPECT_EQ(h.Percentile(99), 0u);
  h.Record(12345);
  EXPECT_EQ(h.Percentile(50), 12345u);  // Clamped to what was recorded.
  EXPECT_EQ(h.Percentile(100), 12345u);
}

}  // namespace
}  // namespace rkv::bench
