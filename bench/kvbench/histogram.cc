#include "bench/kvbench/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace rkv::bench {

Histogram::Histogram() : counts_(kBuckets) {}

Histogram& Histogram::operator=(const Histogram& other) {
  if (this == &other) return *this;
  for (auto& c : counts_) Store(c, 0);
  Store(count_, 0);
  Store(sum_, 0);
  Store(min_, UINT64_MAX);
  Store(max_, 0);
  Merge(other);
  return *this;
}

int Histogram::BucketOf(uint64_t value) {
  if (value < 2 * kSubBuckets) return static_cast<int>(value);
  const int log2 = 63 - std::countl_zero(value);  // >= kSubBucketBits + 1
  const int shift = log2 - kSubBucketBits;
  // value >> shift is in [kSubBuckets, 2 * kSubBuckets).
  return shift * kSubBuckets + static_cast<int>(value >> shift);
}

uint64_t Histogram::BucketLow(int bucket) {
  if (bucket < 2 * kSubBuckets) return static_cast<uint64_t>(bucket);
  const int shift = bucket / kSubBuckets - 1;
  const uint64_t sub = static_cast<uint64_t>(bucket % kSubBuckets + kSubBuckets);
  return sub << shift;
}

uint64_t Histogram::BucketHigh(int bucket) {
  if (bucket < 2 * kSubBuckets) return static_cast<uint64_t>(bucket);
  const int shift = bucket / kSubBuckets - 1;
  return BucketLow(bucket) + ((uint64_t{1} << shift) - 1);
}

void Histogram::Record(uint64_t value) {
  auto& c = counts_[BucketOf(value)];
  Store(c, Load(c) + 1);
  Store(count_, Load(count_) + 1);
  Store(sum_, Load(sum_) + value);
  if (value < Load(min_)) Store(min_, value);
  if (value > Load(max_)) Store(max_, value);
}

void Histogram::Merge(const Histogram& other) {
  if (counts_.empty()) counts_ = std::vector<std::atomic<uint64_t>>(kBuckets);
  uint64_t n = 0;
  for (int i = 0; i < kBuckets; ++i) {
    const uint64_t c = Load(other.counts_[i]);
    if (c == 0) continue;
    Store(counts_[i], Load(counts_[i]) + c);
    n += c;
  }
  // The bucket counts are the truth for percentiles; count_ follows them so
  // that a snapshot of a running histogram stays self-consistent.
  Store(count_, Load(count_) + n);
  Store(sum_, Load(sum_) + Load(other.sum_));
  Store(min_, std::min(Load(min_), Load(other.min_)));
  Store(max_, std::max(Load(max_), Load(other.max_)));
}

double Histogram::mean() const {
  const uint64_t n = count();
  return n ? static_cast<double>(Load(sum_)) / static_cast<double>(n) : 0.0;
}

uint64_t Histogram::Percentile(double p) const {
  const uint64_t n = count();
  if (n == 0) return 0;
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(n))));
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += Load(counts_[i]);
    if (seen >= rank) {
      // The middle of the bucket, kept within what was actually recorded.
      const uint64_t mid = BucketLow(i) + (BucketHigh(i) - BucketLow(i)) / 2;
      return std::clamp(mid, min(), max());
    }
  }
  return max();
}

}  // namespace rkv::bench
