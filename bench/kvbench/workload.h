// YCSB's core workloads: what operations a run issues, in what mix, on
// which keys, and how keys are named.
#ifndef RKV_BENCH_KVBENCH_WORKLOAD_H_
#define RKV_BENCH_KVBENCH_WORKLOAD_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/kvbench/generators.h"
#include "common/random.h"

namespace rkv::bench {

// kDelete is no YCSB operation: rkv's Delete, mixed in by --delete_proportion.
enum class Op { kRead = 0, kUpdate = 1, kInsert = 2, kReadModifyWrite = 3, kDelete = 4 };
inline constexpr int kOps = 5;
const char* OpName(Op op);  // "read", "update", "insert", "rmw", "delete"

enum class Distribution { kZipfian, kLatest, kUniform };
absl::StatusOr<Distribution> ParseDistribution(absl::string_view name);
const char* DistributionName(Distribution d);

struct WorkloadSpec {
  std::string name;                        // "a".."f", or "custom" once proportions are overridden.
  std::array<double, kOps> proportions{};  // Indexed by Op.
  Distribution distribution = Distribution::kZipfian;
};

// YCSB's workloads A (update heavy), B (read mostly), C (read only),
// D (read latest) and F (read-modify-write). E (short ranges) is refused:
// a hash store has no scans.
absl::StatusOr<WorkloadSpec> WorkloadByName(absl::string_view name);

// A proportion set by flag: InvalidArgument unless every proportion is in
// [0, 1] and they do not all vanish.
absl::Status ValidateProportions(const std::array<double, kOps>& proportions);

// YCSB's key for a key number with insertorder=hashed: "user" (or another
// prefix) followed by the decimal FNV-1a 64 hash of the number.
std::string KeyName(int64_t keynum, absl::string_view prefix = "user");

// Picks operations in the workload's proportions (YCSB's DiscreteGenerator).
class OpChooser {
 public:
  explicit OpChooser(const std::array<double, kOps>& proportions);
  Op Next(Rng& rng) const;

 private:
  std::array<double, kOps> cumulative_{};
};

// Picks the key number of the next read or update. Never a key whose insert
// has not been acknowledged: YCSB draws again when one comes up.
class KeyChooser {
 public:
  // `records` were loaded; `expected_inserts` sizes the zipfian key space
  // so that popularity does not shift as inserts arrive (as YCSB does).
  KeyChooser(Distribution distribution, int64_t records, int64_t expected_inserts,
             const InsertSequence& inserts);
  int64_t Next(Rng& rng);

 private:
  struct Uniform {
    int64_t records;
  };
  const InsertSequence& inserts_;
  std::variant<ScrambledZipfianGenerator, SkewedLatestGenerator, Uniform> generator_;
};

}  // namespace rkv::bench

#endif  // RKV_BENCH_KVBENCH_WORKLOAD_H_
