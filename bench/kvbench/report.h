// kvbench's output: the summary table people read and the JSON scripts read.
#ifndef RKV_BENCH_KVBENCH_REPORT_H_
#define RKV_BENCH_KVBENCH_REPORT_H_

#include <iosfwd>
#include <map>
#include <optional>
#include <string>

#include "bench/kvbench/runner.h"

namespace rkv::bench {

// With `client_stats`, also rkv's client library's own counts (rkv::OpStats:
// outcomes, and latency quantiles as the bounds of its buckets).
void PrintSummary(const PhaseResult& result, bool client_stats, std::ostream& out);

// One JSON object: `settings` as given (already JSON values), the last
// phase's figures at the top level (throughput_ops, latency_us by op with
// p50, p90, p99, p999, max and mean, errors, verify, rkv_costs, rkv_client),
// and each
// phase's figures under "load", "run" and "check".
std::string ToJson(const std::map<std::string, std::string>& settings,
                   const std::optional<PhaseResult>& load, const std::optional<PhaseResult>& run,
                   const std::optional<PhaseResult>& check = std::nullopt);

}  // namespace rkv::bench

#endif  // RKV_BENCH_KVBENCH_REPORT_H_
