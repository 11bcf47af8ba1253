// YCSB's number generators, with its algorithms and constants, so that a
// workload here picks the keys a YCSB client would (Cooper et al., SoCC
// 2010; the zipfian algorithm is Gray et al., SIGMOD 1994).
//
// Each worker thread owns its generators (they hold a reference to that
// thread's Rng); only the insert sequence is shared.
#ifndef RKV_BENCH_KVBENCH_GENERATORS_H_
#define RKV_BENCH_KVBENCH_GENERATORS_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>

#include "common/random.h"

namespace rkv::bench {

// YCSB's Utils.fnvhash64: FNV-1a over the 8 little-endian bytes of `value`,
// made non-negative as Java's Math.abs does.
int64_t YcsbFnvHash64(int64_t value);

// Zipfian over [min, max]: item min is the most popular. `zetan` may be
// given precomputed (as YCSB does for its scrambled generator).
class ZipfianGenerator {
 public:
  static constexpr double kZipfianConstant = 0.99;

  ZipfianGenerator(int64_t min, int64_t max, double theta = kZipfianConstant);
  ZipfianGenerator(int64_t min, int64_t max, double theta, double zetan);

  int64_t Next(Rng& rng) { return Next(rng, items_); }
  // As YCSB's nextLong(itemcount): a caller whose item count grows passes
  // it here and zeta is extended incrementally.
  int64_t Next(Rng& rng, int64_t item_count);

  // zeta(n, theta) = sum over i in [1, n] of 1 / i^theta.
  static double Zeta(int64_t n, double theta) { return Zeta(0, n, theta, 0.0); }
  static double Zeta(int64_t start, int64_t n, double theta, double initial_sum);

 private:
  int64_t items_;
  int64_t base_;
  double theta_;
  double zeta2theta_;
  double alpha_;
  double zetan_;
  int64_t count_for_zeta_;
  double eta_;
};

// YCSB's ScrambledZipfianGenerator: zipfian popularity, spread over the key
// space by hashing, so that popular keys are not clustered: theta = 0.99
// over 10^10 items with YCSB's precomputed zeta, hashed onto [min, max].
class ScrambledZipfianGenerator {
 public:
  static constexpr double kZetan = 26.46902820178302;
  static constexpr int64_t kItemCount = 10000000000LL;

  ScrambledZipfianGenerator(int64_t min, int64_t max);
  int64_t Next(Rng& rng);

 private:
  int64_t min_;
  int64_t item_count_;
  ZipfianGenerator zipfian_;
};

// The sequence of key numbers to insert, shared by all threads. A number
// counts as inserted (`last()` reaches it) only once it and every number
// before it were acknowledged, so that readers never ask for a key whose
// insert has not completed (YCSB's AcknowledgedCounterGenerator).
class InsertSequence {
 public:
  explicit InsertSequence(int64_t start) : next_(start), limit_(start - 1) {}

  int64_t Next() { return next_.fetch_add(1, std::memory_order_relaxed); }
  void Acknowledge(int64_t value);
  int64_t last() const { return limit_.load(std::memory_order_acquire); }

 private:
  std::atomic<int64_t> next_;
  std::atomic<int64_t> limit_;
  std::mutex mu_;
  std::set<int64_t> pending_;  // Acknowledged, above a gap.
};

// YCSB's SkewedLatestGenerator: zipfian over recency, the latest insert
// being the most popular.
class SkewedLatestGenerator {
 public:
  explicit SkewedLatestGenerator(const InsertSequence& basis);
  int64_t Next(Rng& rng);

 private:
  const InsertSequence& basis_;
  ZipfianGenerator zipfian_;
};

}  // namespace rkv::bench

#endif  // RKV_BENCH_KVBENCH_GENERATORS_H_
