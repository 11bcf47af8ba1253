// A latency histogram with HDR-style precision: log-linear buckets (128 per
// power of two above 256), so any value is reported within 0.4 % of itself.
// One writer (the thread that owns it) and any number of readers: counters
// are atomics written with plain relaxed stores, so a reporter may merge a
// running thread's histogram without a lock and without slowing it down.
#ifndef RKV_BENCH_KVBENCH_HISTOGRAM_H_
#define RKV_BENCH_KVBENCH_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace rkv::bench {

class Histogram {
 public:
  static constexpr int kSubBucketBits = 7;  // 128 sub-buckets: <= 1/256 relative error.

  Histogram();
  Histogram(const Histogram& other) { Merge(other); }
  Histogram& operator=(const Histogram& other);

  // Owner thread only.
  void Record(uint64_t value);

  // Adds `other`'s counts (a snapshot if `other` is being written).
  void Merge(const Histogram& other);

  uint64_t count() const { return Load(count_); }
  uint64_t min() const { return count() ? Load(min_) : 0; }
  uint64_t max() const { return Load(max_); }
  double mean() const;
  // The value at percentile `p` (0..100]: the smallest recorded value v such
  // that at least p % of values are <= v, to within the bucket precision.
  uint64_t Percentile(double p) const;

  // Bucket arithmetic, exposed for tests.
  static int BucketOf(uint64_t value);
  static uint64_t BucketLow(int bucket);
  static uint64_t BucketHigh(int bucket);  // Inclusive.

 private:
  static constexpr int kSubBuckets = 1 << kSubBucketBits;
  // Values below 2*kSubBuckets have a bucket each; every power of two above
  // them is split into kSubBuckets.
  static constexpr int kBuckets = (64 - kSubBucketBits) * kSubBuckets + kSubBuckets;

  static uint64_t Load(const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); }
  static void Store(std::atomic<uint64_t>& a, uint64_t v) { a.store(v, std::memory_order_relaxed); }

  std::vector<std::atomic<uint64_t>> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> min_{UINT64_MAX};
  std::atomic<uint64_t> max_{0};
};

}  // namespace rkv::bench

#endif  // RKV_BENCH_KVBENCH_HISTOGRAM_H_
