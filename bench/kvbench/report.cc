#include "bench/kvbench/report.h"

#include <cmath>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace rkv::bench {
namespace {

double Us(uint64_t ns) { return static_cast<double>(ns) / 1e3; }

struct Percentiles {
  const char* name;
  double p;
};
constexpr Percentiles kPercentiles[] = {{"p50", 50}, {"p90", 90}, {"p99", 99}, {"p999", 99.9}};

const char* RkvOpName(int type) {
  static const char* const kNames[] = {"get", "put", "insert", "delete"};
  return kNames[type];
}

const char* const kOutcomeNames[kOpOutcomes] = {"ok", "not_found", "already_exists", "unavailable",
                                                "failed"};

uint64_t Finished(const OpStats& s) {
  uint64_t n = 0;
  for (uint64_t c : s.outcomes) n += c;
  return n;
}

// The bound, in microseconds, of the library's latency bucket that holds
// the q-th quantile (0 < q <= 1): the quantile is at most that. Infinite
// when it lies in the last bucket.
double QuantileBoundUs(const OpStats& s, double q) {
  uint64_t total = 0;
  for (uint64_t c : s.latency_buckets) total += c;
  const auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  uint64_t seen = 0;
  for (int i = 0; i < kLatencyBuckets; ++i) {
    seen += s.latency_buckets[i];
    if (seen >= rank) return absl::ToDoubleMicroseconds(LatencyBucketBound(i));
  }
  return 0;
}

double MeanUs(const OpStats& s) {
  const uint64_t n = Finished(s);
  return n == 0 ? 0 : absl::ToDoubleMicroseconds(s.latency_sum) / static_cast<double>(n);
}

std::string JsonNumber(double v) { return std::isinf(v) ? "null" : absl::StrFormat("%.1f", v); }

std::string PhaseJson(const PhaseResult& r) {
  std::vector<std::string> fields;
  fields.push_back(absl::StrFormat("\"seconds\": %.3f", r.seconds));
  fields.push_back(absl::StrCat("\"operations\": ", r.operations));
  fields.push_back(absl::StrFormat("\"throughput_ops\": %.1f", r.throughput()));
  fields.push_back(absl::StrCat("\"errors\": ", r.errors));
  fields.push_back(absl::StrCat("\"not_found\": ", r.not_found));
  fields.push_back(absl::StrCat("\"acked_writes\": ", r.acked_writes));
  fields.push_back(absl::StrCat("\"acked_inserts\": ", r.acked_inserts));
  fields.push_back(absl::StrCat("\"insert_exists\": ", r.insert_exists));
  fields.push_back(absl::StrCat("\"acked_deletes\": ", r.acked_deletes));
  fields.push_back(absl::StrCat("\"delete_absent\": ", r.delete_absent));
  fields.push_back(absl::StrCat("\"verify\": {\"reads_checked\": ", r.reads_checked,
                                ", \"mismatches\": ", r.mismatches, ", \"lost\": ", r.lost, "}"));
  std::vector<std::string> ops;
  for (int i = 0; i < kOps; ++i) {
    const Histogram& h = r.latency_ns[i];
    if (h.count() == 0) continue;
    std::string o = absl::StrCat("\"", OpName(static_cast<Op>(i)), "\": {\"count\": ", h.count());
    for (const Percentiles& p : kPercentiles) {
      absl::StrAppendFormat(&o, ", \"%s\": %.1f", p.name, Us(h.Percentile(p.p)));
    }
    absl::StrAppendFormat(&o, ", \"max\": %.1f, \"mean\": %.1f}", Us(h.max()), h.mean() / 1e3);
    ops.push_back(std::move(o));
  }
  fields.push_back(absl::StrCat("\"latency_us\": {", absl::StrJoin(ops, ", "), "}"));
  if (r.costs) {
    std::vector<std::string> costs;
    for (int i = 0; i < kOpTypes; ++i) {
      const OpCosts& c = (*r.costs)[i];
      if (c.ops == 0) continue;
      const double n = static_cast<double>(c.ops);
      costs.push_back(absl::StrFormat(
          "\"%s\": {\"ops\": %d, \"round_trips_per_op\": %.3f, \"requests_per_op\": %.3f, "
          "\"bytes_per_op\": %.1f, \"retries\": %d}",
          RkvOpName(i), c.ops, c.round_trips / n, c.requests / n, c.bytes / n, c.retries));
    }
    fields.push_back(absl::StrCat("\"rkv_costs\": {", absl::StrJoin(costs, ", "), "}"));
  }
  if (r.stats) {
    std::vector<std::string> types;
    for (int i = 0; i < kOpTypes; ++i) {
      const OpStats& st = (*r.stats)[i];
      if (Finished(st) == 0) continue;
      std::string t = absl::StrCat("\"", RkvOpName(i), "\": {");
      for (int o = 0; o < kOpOutcomes; ++o) {
        absl::StrAppend(&t, "\"", kOutcomeNames[o], "\": ", st.outcomes[o], ", ");
      }
      absl::StrAppend(&t, "\"latency_p50_us_at_most\": ", JsonNumber(QuantileBoundUs(st, 0.5)),
                      ", \"latency_p99_us_at_most\": ", JsonNumber(QuantileBoundUs(st, 0.99)),
                      ", \"latency_mean_us\": ", JsonNumber(MeanUs(st)), "}");
      types.push_back(std::move(t));
    }
    fields.push_back(absl::StrCat("\"rkv_client\": {", absl::StrJoin(types, ", "), "}"));
  }
  return absl::StrJoin(fields, ", ");
}

}  // namespace

void PrintSummary(const PhaseResult& r, bool client_stats, std::ostream& out) {
  out << absl::StrFormat("\n[%s] %d operations in %.2f s: %.0f ops/s, %d errors", r.phase,
                         r.operations, r.seconds, r.throughput(), r.errors);
  const bool deleted = r.acked_deletes + r.delete_absent > 0;
  if (r.not_found > 0) {
    out << absl::StrFormat(", %d reads found nothing%s", r.not_found,
                           deleted ? "" : " (were the records loaded?)");
  }
  out << "\n";
  if (r.acked_inserts + r.insert_exists > 0 || deleted) {
    out << absl::StrFormat(
        "inserts: %d acknowledged, %d already present; deletes: %d acknowledged, %d absent\n",
        r.acked_inserts, r.insert_exists, r.acked_deletes, r.delete_absent);
  }
  if (r.errors > 0) out << "first error: " << r.first_error << "\n";
  out << absl::StrFormat("%-8s %10s %10s %10s %10s %10s %10s %10s\n", "op", "count", "p50 us",
                         "p90 us", "p99 us", "p99.9 us", "max us", "mean us");
  for (int i = 0; i < kOps; ++i) {
    const Histogram& h = r.latency_ns[i];
    if (h.count() == 0) continue;
    out << absl::StrFormat("%-8s %10d %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n",
                           OpName(static_cast<Op>(i)), h.count(), Us(h.Percentile(50)),
                           Us(h.Percentile(90)), Us(h.Percentile(99)), Us(h.Percentile(99.9)),
                           Us(h.max()), h.mean() / 1e3);
  }
  if (r.costs) {
    out << absl::StrFormat("%-8s %10s %12s %12s %12s %10s\n", "rkv op", "count", "RTT/op",
                           "requests/op", "bytes/op", "retries");
    for (int i = 0; i < kOpTypes; ++i) {
      const OpCosts& c = (*r.costs)[i];
      if (c.ops == 0) continue;
      const double n = static_cast<double>(c.ops);
      out << absl::StrFormat("%-8s %10d %12.2f %12.2f %12.1f %10d\n", RkvOpName(i), c.ops,
                             c.round_trips / n, c.requests / n, c.bytes / n, c.retries);
    }
  }
  if (client_stats && r.stats) {
    out << absl::StrFormat("%-10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "rkv client", "ok",
                           "not found", "exists", "unavail", "failed",
                           "p50 us<=", "p99 us<=", "mean us");
    for (int i = 0; i < kOpTypes; ++i) {
      const OpStats& st = (*r.stats)[i];
      if (Finished(st) == 0) continue;
      out << absl::StrFormat("%-10s %10d %10d %10d %10d %10d %10.0f %10.0f %10.1f\n", RkvOpName(i),
                             st.outcomes[0], st.outcomes[1], st.outcomes[2], st.outcomes[3],
                             st.outcomes[4], QuantileBoundUs(st, 0.5), QuantileBoundUs(st, 0.99),
                             MeanUs(st));
    }
  }
  if (r.reads_checked > 0 || r.mismatches > 0) {
    out << absl::StrFormat("verify: %d reads checked, %d mismatches%s\n", r.reads_checked,
                           r.mismatches,
                           r.mismatches ? absl::StrCat(" (first: ", r.first_mismatch, ")") : "");
  }
}

std::string ToJson(const std::map<std::string, std::string>& settings,
                   const std::optional<PhaseResult>& load, const std::optional<PhaseResult>& run,
                   const std::optional<PhaseResult>& check) {
  std::vector<std::string> fields;
  for (const auto& [k, v] : settings) fields.push_back(absl::StrCat("\"", k, "\": ", v));
  // The last phase's figures at the top as well, where scripts look first.
  if (const auto& last = run ? run : load) fields.push_back(PhaseJson(*last));
  if (load) fields.push_back(absl::StrCat("\"load\": {", PhaseJson(*load), "}"));
  if (run) fields.push_back(absl::StrCat("\"run\": {", PhaseJson(*run), "}"));
  if (check) fields.push_back(absl::StrCat("\"check\": {", PhaseJson(*check), "}"));
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}\n");
}

}  // namespace rkv::bench
