#include "bench/kvbench/generators.h"

#include <cmath>

#include "absl/strings/string_view.h"
#include "common/hash.h"

namespace rkv::bench {

int64_t YcsbFnvHash64(int64_t value) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff);
  }
  const auto h = static_cast<int64_t>(Fnv1a64(absl::string_view(bytes, sizeof(bytes))));
  // Java's Math.abs: INT64_MIN stays as it is.
  return h == INT64_MIN ? h : (h < 0 ? -h : h);
}

double ZipfianGenerator::Zeta(int64_t start, int64_t n, double theta, double initial_sum) {
  double sum = initial_sum;
  for (int64_t i = start; i < n; ++i) sum += 1.0 / std::pow(static_cast<double>(i + 1), theta);
  return sum;
}

ZipfianGenerator::ZipfianGenerator(int64_t min, int64_t max, double theta)
    : ZipfianGenerator(min, max, theta, Zeta(max - min + 1, theta)) {}

ZipfianGenerator::ZipfianGenerator(int64_t min, int64_t max, double theta, double zetan)
    : items_(max - min + 1),
      base_(min),
      theta_(theta),
      zeta2theta_(Zeta(2, theta)),
      alpha_(1.0 / (1.0 - theta)),
      zetan_(zetan),
      count_for_zeta_(items_),
      eta_((1 - std::pow(2.0 / static_cast<double>(items_), 1 - theta)) /
           (1 - zeta2theta_ / zetan)) {}

int64_t ZipfianGenerator::Next(Rng& rng, int64_t item_count) {
  if (item_count > count_for_zeta_) {
    // Growing: extend the sum (YCSB keeps `items` in eta, and so do we).
    zetan_ = Zeta(count_for_zeta_, item_count, theta_, zetan_);
    count_for_zeta_ = item_count;
    eta_ =
        (1 - std::pow(2.0 / static_cast<double>(items_), 1 - theta_)) / (1 - zeta2theta_ / zetan_);
  }
  const double u = rng.NextDouble();
  const double uz = u * zetan_;
  if (uz < 1.0) return base_;
  if (uz < 1.0 + std::pow(0.5, theta_)) return base_ + 1;
  return base_ + static_cast<int64_t>(static_cast<double>(item_count) *
                                      std::pow(eta_ * u - eta_ + 1, alpha_));
}

ScrambledZipfianGenerator::ScrambledZipfianGenerator(int64_t min, int64_t max)
    : min_(min),
      item_count_(max - min + 1),
      zipfian_(0, kItemCount, ZipfianGenerator::kZipfianConstant, kZetan) {}

int64_t ScrambledZipfianGenerator::Next(Rng& rng) {
  return min_ + YcsbFnvHash64(zipfian_.Next(rng)) % item_count_;
}

void InsertSequence::Acknowledge(int64_t value) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.insert(value);
  int64_t limit = limit_.load(std::memory_order_relaxed);
  while (!pending_.empty() && *pending_.begin() == limit + 1) {
    pending_.erase(pending_.begin());
    ++limit;
  }
  limit_.store(limit, std::memory_order_release);
}

SkewedLatestGenerator::SkewedLatestGenerator(const InsertSequence& basis)
    : basis_(basis), zipfian_(0, basis.last() - 1) {}

int64_t SkewedLatestGenerator::Next(Rng& rng) {
  const int64_t max = basis_.last();
  return max - zipfian_.Next(rng, max);
}

}  // namespace rkv::bench
