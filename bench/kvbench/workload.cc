#include "bench/kvbench/workload.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace rkv::bench {

const char* OpName(Op op) {
  switch (op) {
    case Op::kRead:
      return "read";
    case Op::kUpdate:
      return "update";
    case Op::kInsert:
      return "insert";
    case Op::kReadModifyWrite:
      return "rmw";
    case Op::kDelete:
      return "delete";
  }
  return "?";
}

absl::StatusOr<Distribution> ParseDistribution(absl::string_view name) {
  if (name == "zipfian") return Distribution::kZipfian;
  if (name == "latest") return Distribution::kLatest;
  if (name == "uniform") return Distribution::kUniform;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown request distribution '", name, "': use zipfian, latest or uniform"));
}

const char* DistributionName(Distribution d) {
  switch (d) {
    case Distribution::kZipfian:
      return "zipfian";
    case Distribution::kLatest:
      return "latest";
    case Distribution::kUniform:
      return "uniform";
  }
  return "?";
}

absl::StatusOr<WorkloadSpec> WorkloadByName(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  WorkloadSpec w;
  w.name = n;
  auto& p = w.proportions;
  if (n == "a") {
    p[static_cast<int>(Op::kRead)] = 0.5;
    p[static_cast<int>(Op::kUpdate)] = 0.5;
  } else if (n == "b") {
    p[static_cast<int>(Op::kRead)] = 0.95;
    p[static_cast<int>(Op::kUpdate)] = 0.05;
  } else if (n == "c") {
    p[static_cast<int>(Op::kRead)] = 1.0;
  } else if (n == "d") {
    p[static_cast<int>(Op::kRead)] = 0.95;
    p[static_cast<int>(Op::kInsert)] = 0.05;
    w.distribution = Distribution::kLatest;
  } else if (n == "f") {
    p[static_cast<int>(Op::kRead)] = 0.5;
    p[static_cast<int>(Op::kReadModifyWrite)] = 0.5;
  } else if (n == "e") {
    return absl::InvalidArgumentError(
        "workload E is YCSB's short-range scan workload; rkv is a hash store and has no range "
        "scans. Use workload a, b, c, d or f");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown workload '", name, "': use a, b, c, d or f"));
  }
  return w;
}

absl::Status ValidateProportions(const std::array<double, kOps>& proportions) {
  double sum = 0;
  for (double p : proportions) {
    if (!(p >= 0 && p <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("operation proportions must lie in [0, 1], not ", p));
    }
    sum += p;
  }
  if (sum <= 0) return absl::InvalidArgumentError("operation proportions are all zero");
  return absl::OkStatus();
}

std::string KeyName(int64_t keynum, absl::string_view prefix) {
  return absl::StrCat(prefix, YcsbFnvHash64(keynum));
}

OpChooser::OpChooser(const std::array<double, kOps>& proportions) {
  double sum = 0;
  for (int i = 0; i < kOps; ++i) {
    sum += proportions[i];
    cumulative_[i] = sum;
  }
  for (double& c : cumulative_) c /= sum;  // Proportions need not sum to 1, as in YCSB.
}

Op OpChooser::Next(Rng& rng) const {
  const double u = rng.NextDouble();
  for (int i = 0; i < kOps; ++i) {
    if (u < cumulative_[i]) return static_cast<Op>(i);
  }
  // Rounding left u above the last sum: the last operation with weight.
  for (int i = kOps - 1; i >= 0; --i) {
    if (cumulative_[i] > (i ? cumulative_[i - 1] : 0)) return static_cast<Op>(i);
  }
  return Op::kRead;
}

KeyChooser::KeyChooser(Distribution distribution, int64_t records, int64_t expected_inserts,
                       const InsertSequence& inserts)
    : inserts_(inserts), generator_(Uniform{records}) {
  switch (distribution) {
    case Distribution::kZipfian:
      // YCSB: the key space is the records plus twice the expected inserts.
      generator_.emplace<ScrambledZipfianGenerator>(0, records + 2 * expected_inserts);
      break;
    case Distribution::kLatest:
      generator_.emplace<SkewedLatestGenerator>(inserts);
      break;
    case Distribution::kUniform:
      break;
  }
}

int64_t KeyChooser::Next(Rng& rng) {
  const int64_t limit = inserts_.last();
  for (;;) {
    int64_t k;
    if (auto* z = std::get_if<ScrambledZipfianGenerator>(&generator_)) {
      k = z->Next(rng);
    } else if (auto* l = std::get_if<SkewedLatestGenerator>(&generator_)) {
      k = l->Next(rng);
    } else {
      const auto records = static_cast<uint64_t>(std::get<Uniform>(generator_).records);
      k = static_cast<int64_t>(rng.Uniform(records));
    }
    if (k <= limit) return k;
  }
}

}  // namespace rkv::bench
