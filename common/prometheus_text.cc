#include "common/prometheus_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rkv {
namespace {

// HELP text escapes backslash and newline; label values also the quote.
std::string Escape(absl::string_view s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void PrometheusText::Family(absl::string_view name, absl::string_view type,
                            absl::string_view help) {
  family_ = std::string(name);
  absl::StrAppend(&out_, "# HELP ", name, " ", Escape(help, false), "\n# TYPE ", name, " ", type,
                  "\n");
}

void PrometheusText::Sample(uint64_t value, const Labels& labels) {
  Line(labels, absl::StrCat(value));
}

void PrometheusText::Sample(double value, const Labels& labels) {
  Line(labels, absl::StrFormat("%.17g", value));
}

void MetricHistogram::Observe(double v) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (v <= bounds_[i]) counts_[i]++;
  }
  count_++;
  sum_ += v;
}

void PrometheusText::Histogram(absl::string_view name, absl::string_view help,
                               const MetricHistogram& h) {
  Family(name, "histogram", help);
  const std::string base(name);
  family_ = base + "_bucket";
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    Line({{"le", absl::StrFormat("%g", h.bounds()[i])}}, absl::StrCat(h.counts()[i]));
  }
  Line({{"le", "+Inf"}}, absl::StrCat(h.count()));
  family_ = base + "_sum";
  Line({}, absl::StrFormat("%.17g", h.sum()));
  family_ = base + "_count";
  Line({}, absl::StrCat(h.count()));
  family_ = base;
}

void PrometheusText::Line(const Labels& labels, const std::string& value) {
  out_ += family_;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(&out_, i > 0 ? "," : "", labels[i].first, "=\"",
                      Escape(labels[i].second, true), "\"");
    }
    out_ += '}';
  }
  absl::StrAppend(&out_, " ", value, "\n");
}

}  // namespace rkv
