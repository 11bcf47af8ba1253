// kvbench: YCSB's core workloads against rkv, memcached or Redis.
#include <fstream>
#include <iostream>
#include <random>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/kvbench/report.h"
#include "bench/kvbench/runner.h"
#include "common/cluster_token.h"
#include "common/fabric/fabric_flags.h"
#include "common/file_limit.h"
#include "common/flags.h"
#include "common/logging.h"
#include "proto/coordinator_stub.h"

ABSL_FLAG(std::string, driver, "rkv", "The store: rkv, memcached or redis.");
ABSL_FLAG(std::string, workload, "a",
          "YCSB core workload: a (50% read, 50% update), b (95/5), c (read only), d (95% read "
          "latest, 5% insert), f (50% read, 50% read-modify-write). E (scans) is not supported.");
ABSL_FLAG(std::string, phase, "both", "load (write the records), run (the mix), or both.");
ABSL_FLAG(int64_t, records, 100000, "Records the load phase writes and the run phase reads.");
ABSL_FLAG(int64_t, operations, 0, "Operations in the run phase (0: bounded by --duration).");
ABSL_FLAG(absl::Duration, duration, absl::ZeroDuration(),
          "Length of the run phase, e.g. 30s (default 10s unless --operations is given; with "
          "both, whichever ends first).");
ABSL_FLAG(int, threads, 1, "Worker threads, each with its own connection.");
ABSL_FLAG(int, outstanding, 16, "Operations in flight per thread (pipelined where the store can).");
ABSL_FLAG(double, target_ops, 0,
          "Aim for this many operations per second in all (0: as fast as possible). Latency is "
          "measured from each operation's intended start, so falling behind shows in the tail.");
ABSL_FLAG(int64_t, value_size, 1000,
          "Value bytes (YCSB: 10 fields of 100 bytes, written and read whole).");
ABSL_FLAG(double, read_proportion, -1, "Override the workload's share of reads.");
ABSL_FLAG(double, update_proportion, -1, "Override the workload's share of updates.");
ABSL_FLAG(double, insert_proportion, -1, "Override the workload's share of inserts.");
ABSL_FLAG(double, rmw_proportion, -1, "Override the workload's share of read-modify-writes.");
ABSL_FLAG(double, delete_proportion, -1,
          "rkv only: a share of deletes (rkv Delete, NotFound when absent; no YCSB operation) of "
          "keys chosen as reads are. Above 0, the run's inserts become rkv Inserts "
          "(AlreadyExists when present) that first bring back keys the thread deleted, and "
          "reads, inserts and deletes finding a key absent or present are answers, not errors; "
          "with --verify each answer is checked too.");
ABSL_FLAG(std::string, request_distribution, "",
          "zipfian (YCSB's scrambled zipfian, theta 0.99), latest or uniform; default: the "
          "workload's.");
ABSL_FLAG(bool, verify, false,
          "Values carry key and version; every read is checked against what this run wrote. "
          "Mismatches make the exit status 1.");
ABSL_FLAG(bool, check, false,
          "With --verify: after the run, read back every key this run acknowledged a change "
          "of and check it still holds that write or a later one, or is absent after a delete "
          "(phase \"check\"; a key found absent though written is a lost write).");
ABSL_FLAG(absl::Duration, check_patience, absl::Seconds(30),
          "How long the check retries keys whose reads fail (servers restarting).");
ABSL_FLAG(std::string, key_prefix, "user", "Keys are this prefix and YCSB's hashed key number.");
ABSL_FLAG(std::string, json, "", "Also write the results to this file as JSON.");
ABSL_FLAG(bool, progress, true, "Print a progress line every second.");
ABSL_FLAG(bool, client_stats, false,
          "rkv: also print the client library's own counters (Client::stats): operations by "
          "type and outcome, and its latency quantiles (the JSON has them always).");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the key and operation choices (0: a random one).");
ABSL_FLAG(std::string, coordinator, rkv::kDefaultCoordinator,
          "rkv: every kvcoord's address, comma-separated.");
ABSL_FLAG(std::string, memcached, "127.0.0.1:11211", "memcached: the server's address.");
ABSL_FLAG(std::string, redis, "127.0.0.1:6379", "redis: the server's address.");

namespace {

constexpr char kUsage[] =
    "kvbench: YCSB core workloads against rkv, memcached or Redis.\n"
    "Usage: kvbench [--driver=rkv|memcached|redis] [--workload=a|b|c|d|f] [--phase=both|load|run]\n"
    "               [--records=N] [--operations=N | --duration=10s] [--threads=T]\n"
    "               [--outstanding=K] [--target_ops=R] [--delete_proportion=P]\n"
    "               [--verify [--check]] [--json=FILE]\n"
    "Exit status: 0 when every operation succeeded (and verified), 1 otherwise, 2 for bad flags.";

std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

int Fail(const absl::Status& s) {
  std::cerr << "kvbench: " << s.message() << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = rkv::ParseFlags(argc, argv, kUsage);
  if (absl::Status s = rkv::EnsureFileLimit(64); !s.ok()) {
    std::cerr << "kvbench: " << s.message() << "\n";
    return 1;
  }
  if (args.size() > 1)
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", args[1], "' (see --help)")));
  if (std::getenv("RKV_LOG_LEVEL") == nullptr) rkv::SetMinLogSeverity(rkv::LogSeverity::kWarning);
  using namespace rkv::bench;

  absl::StatusOr<WorkloadSpec> workload = WorkloadByName(absl::GetFlag(FLAGS_workload));
  if (!workload.ok()) return Fail(workload.status());
  const double overrides[kOps] = {
      absl::GetFlag(FLAGS_read_proportion), absl::GetFlag(FLAGS_update_proportion),
      absl::GetFlag(FLAGS_insert_proportion), absl::GetFlag(FLAGS_rmw_proportion),
      absl::GetFlag(FLAGS_delete_proportion)};
  for (int i = 0; i < kOps; ++i) {
    if (overrides[i] < 0) continue;
    workload->proportions[i] = overrides[i];
    workload->name = "custom";
  }
  if (absl::Status s = ValidateProportions(workload->proportions); !s.ok()) return Fail(s);
  if (workload->proportions[static_cast<int>(Op::kDelete)] > 0 &&
      absl::GetFlag(FLAGS_driver) != "rkv") {
    return Fail(absl::InvalidArgumentError("--delete_proportion needs --driver=rkv"));
  }
  if (const std::string d = absl::GetFlag(FLAGS_request_distribution); !d.empty()) {
    absl::StatusOr<Distribution> dist = ParseDistribution(d);
    if (!dist.ok()) return Fail(dist.status());
    workload->distribution = *dist;
  }

  const std::string phase = absl::GetFlag(FLAGS_phase);
  if (phase != "both" && phase != "load" && phase != "run") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--phase must be load, run or both, not '", phase, "'")));
  }
  RunConfig config;
  config.workload = *workload;
  config.records = absl::GetFlag(FLAGS_records);
  config.operations = absl::GetFlag(FLAGS_operations);
  config.duration = absl::GetFlag(FLAGS_duration);
  config.threads = absl::GetFlag(FLAGS_threads);
  config.outstanding = absl::GetFlag(FLAGS_outstanding);
  config.target_ops = absl::GetFlag(FLAGS_target_ops);
  const int64_t value_size = absl::GetFlag(FLAGS_value_size);
  if (config.records < 2) return Fail(absl::InvalidArgumentError("--records must be at least 2"));
  if (config.operations < 0 || config.duration < absl::ZeroDuration()) {
    return Fail(absl::InvalidArgumentError("--operations and --duration must not be negative"));
  }
  if (config.threads < 1 || config.threads > 1024 || config.outstanding < 1 ||
      config.outstanding > 4096) {
    return Fail(absl::InvalidArgumentError(
        "--threads must be in [1, 1024] and --outstanding in [1, 4096]"));
  }
  if (config.target_ops < 0) return Fail(absl::InvalidArgumentError("--target_ops must be >= 0"));
  if (value_size < 1 || value_size > (1 << 20)) {
    return Fail(absl::InvalidArgumentError("--value_size must be in [1, 1048576]"));
  }
  if (config.operations == 0 && config.duration == absl::ZeroDuration()) {
    config.duration = absl::Seconds(10);
  }
  config.value_size = static_cast<size_t>(value_size);
  uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (seed == 0) seed = std::random_device{}() | 1;
  config.seed = seed;
  config.key_prefix = absl::GetFlag(FLAGS_key_prefix);
  if (config.key_prefix.empty() || config.key_prefix.size() > 100) {
    return Fail(absl::InvalidArgumentError("--key_prefix must be 1 to 100 bytes"));
  }
  if (absl::GetFlag(FLAGS_progress)) config.progress = &std::cout;

  DriverConfig driver;
  driver.kind = absl::GetFlag(FLAGS_driver);
  driver.outstanding = config.outstanding;
  if (driver.kind == "rkv") {
    driver.address = absl::GetFlag(FLAGS_coordinator);
    const char* cluster_dir = std::getenv("RKV_CLUSTER_DIR");
    auto token = rkv::ClusterTokenFromFlags(
        absl::StrCat(cluster_dir ? cluster_dir : "/tmp/rkv-cluster", "/token"));
    if (!token.ok()) return Fail(token.status());
    // One fabric for every client thread, with --fabric_faults injected.
    auto fabric = rkv::fabric::OpenFabricFromFlags();
    if (!fabric.ok()) return Fail(fabric.status());
    driver.rkv.cluster_token = *token;
    driver.rkv.fabric = std::move(fabric).value();
    driver.rkv.scratch_bytes = std::max<uint64_t>(
        4 << 20, 2 * static_cast<uint64_t>(config.outstanding) * (value_size + 4096));
  } else if (driver.kind == "memcached") {
    driver.address = absl::GetFlag(FLAGS_memcached);
  } else if (driver.kind == "redis") {
    driver.address = absl::GetFlag(FLAGS_redis);
  } else {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("unknown --driver '", driver.kind, "': use rkv, memcached or redis")));
  }
  config.open_driver = [driver] { return OpenDriver(driver); };

  const bool verify = absl::GetFlag(FLAGS_verify);
  const bool check = absl::GetFlag(FLAGS_check);
  if (check && !verify) return Fail(absl::InvalidArgumentError("--check needs --verify"));
  std::cout << absl::StrFormat(
      "kvbench: driver %s at %s, workload %s (%s), %d records of %d bytes, %d threads x %d "
      "outstanding, seed %d%s\n",
      driver.kind, driver.address, workload->name, DistributionName(workload->distribution),
      config.records, value_size, config.threads, config.outstanding, seed,
      verify ? ", verifying" : "");
  Benchmark bench(config,
                  verify ? std::make_unique<Verifier>(seed * 0x2545F4914F6CDD1DULL) : nullptr);
  std::optional<PhaseResult> load, run, checked;
  for (const std::string p : {"load", "run", "check"}) {
    if (p == "check" ? !check : phase != "both" && phase != p) continue;
    absl::StatusOr<PhaseResult> r = p == "load"  ? bench.Load()
                                    : p == "run" ? bench.Run()
                                                 : bench.Check(absl::GetFlag(FLAGS_check_patience));
    if (!r.ok()) {
      std::cerr << "kvbench: " << r.status().message() << "\n";
      return 1;
    }
    PrintSummary(*r, absl::GetFlag(FLAGS_client_stats), std::cout);
    (p == "load" ? load : p == "run" ? run : checked) = *std::move(r);
  }

  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    const std::map<std::string, std::string> settings = {
        {"driver", Quote(driver.kind)},
        {"workload", Quote(workload->name)},
        {"distribution", Quote(DistributionName(workload->distribution))},
        {"records", absl::StrCat(config.records)},
        {"value_bytes", absl::StrCat(value_size)},
        {"threads", absl::StrCat(config.threads)},
        {"outstanding", absl::StrCat(config.outstanding)},
        {"target_ops", absl::StrCat(config.target_ops)},
        {"seed", absl::StrCat(seed)},
    };
    std::ofstream out(path);
    out << ToJson(settings, load, run, checked);
    if (!out.good()) {
      std::cerr << "kvbench: cannot write " << path << "\n";
      return 1;
    }
  }
  uint64_t failures = 0;
  for (const auto* r : {&load, &run, &checked}) {
    if (*r) failures += (*r)->errors + (*r)->mismatches;
  }
  return failures == 0 ? 0 : 1;
}
