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

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a family: its samples follow, each with the family's name.
  // `type` is "counter" or "gauge".
  void Family(absl::string_view name, absl::string_view type, absl::string_view help);
  // A sample of the family begun last (integers print exactly).
  void Sample(uint64_t value, const Labels& labels = {});
  void Sample(double value, const Labels& labels = {});

  const std::string& text() const { return out_; }

 private:
  void Line(const Labels& labels, const std::string& value);

  std::string out_;
  std::string family_;
};

}  // namespace rkv

#endif  // RKV_COMMON_PROMETHEUS_TEXT_H_
