// Metrics in the Prometheus text exposition format (version 0.0.4), as a
// scrape of /metrics returns them. Debian 12 packages no Prometheus
// client library for C++, and the format is small: a HELP and a TYPE line
// per metric family, then one line per sample. Names follow Prometheus's
// conventions (rkv_ prefix, base units, _total for counters).
#ifndef RKV_COMMON_PROMETHEUS_TEXT_H_
#define RKV_COMMON_PROMETHEUS_TEXT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace rkv {

// Observations counted in buckets, as a Prometheus histogram keeps them:
// each bucket counts those at most its upper bound.
class MetricHistogram {
 public:
  explicit MetricHistogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
    counts_.resize(bounds_.size());
  }
  void Observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // counts()[i]: observations at most bounds()[i] (cumulative).
  const std::vector<uint64_t>& counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a family: its samples follow, each with the family's name.
  // `type` is "counter" or "gauge".
  void Family(absl::string_view name, absl::string_view type, absl::string_view help);
  // A sample of the family begun last (integers print exactly).
  void Sample(uint64_t value, const Labels& labels = {});
  void Sample(double value, const Labels& labels = {});
  // A family of one sample without labels.
  void Single(absl::string_view name, absl::string_view type, absl::string_view help,
              uint64_t value) {
    Family(name, type, help);
    Sample(value);
  }
  void Single(absl::string_view name, absl::string_view type, absl::string_view help,
              double value) {
    Family(name, type, help);
    Sample(value);
  }
  // A whole histogram family: its _bucket, _sum and _count samples.
  void Histogram(absl::string_view name, absl::string_view help, const MetricHistogram& h);

  const std::string& text() const { return out_; }

 private:
  void Line(const Labels& labels, const std::string& value);

  std::string out_;
  std::string family_;
};

}  // namespace rkv

#endif  // RKV_COMMON_PROMETHEUS_TEXT_H_
