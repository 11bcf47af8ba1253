// Runs a phase of a workload: worker threads, each with its own driver,
// generators and histograms, keeping --outstanding operations in flight,
// paced by --target-ops if given; a progress line every second.
#ifndef RKV_BENCH_KVBENCH_RUNNER_H_
#define RKV_BENCH_KVBENCH_RUNNER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/kvbench/driver.h"
#include "bench/kvbench/generators.h"
#include "bench/kvbench/histogram.h"
#include "bench/kvbench/verifier.h"
#include "bench/kvbench/workload.h"

namespace rkv::bench {

struct RunConfig {
  WorkloadSpec workload;
  int64_t records = 0;
  int64_t operations = 0;                          // 0: until `duration`.
  absl::Duration duration = absl::ZeroDuration();  // 0: until `operations`.
  int threads = 1;
  int outstanding = 16;
  double target_ops = 0;  // Operations per second over all threads; 0: as fast as possible.
  size_t value_size = 1000;
  uint64_t seed = 1;
  std::string key_prefix = "user";
  std::ostream* progress = nullptr;  // Where progress lines go; null for none.
  std::function<absl::StatusOr<std::unique_ptr<Driver>>()> open_driver;
};

struct PhaseResult {
  std::string phase;  // "load" or "run".
  double seconds = 0;
  uint64_t operations = 0;
  uint64_t errors = 0;
  uint64_t acked_writes = 0;   // Writes (updates and inserts) the store acknowledged.
  uint64_t acked_inserts = 0;  // Of those, rkv Inserts (--delete_proportion).
  uint64_t insert_exists = 0;  // Inserts answered AlreadyExists.
  uint64_t acked_deletes = 0;  // Deletes that removed a key.
  uint64_t delete_absent = 0;  // Deletes answered NotFound.
  uint64_t not_found = 0;      // Reads of absent keys (errors too, unless the mix deletes).
  uint64_t reads_checked = 0;  // --verify
  uint64_t mismatches = 0;     // --verify
  uint64_t lost = 0;           // Of the mismatches: found absent after an acknowledged write.
  std::string first_mismatch;
  std::string first_error;
  std::array<Histogram, kOps> latency_ns;              // By Op, from intended start to completion.
  std::optional<std::array<OpCosts, kOpTypes>> costs;  // rkv only: summed over threads.
  std::optional<std::array<OpStats, kOpTypes>> stats;  // rkv only: the library's, summed.

  double throughput() const { return seconds > 0 ? static_cast<double>(operations) / seconds : 0; }
};

// State that lasts across the phases of one kvbench run.
class Benchmark {
 public:
  // `verifier` is null unless --verify.
  Benchmark(RunConfig config, std::unique_ptr<Verifier> verifier);

  // Writes records 0..records-1 (the load phase; op "insert").
  absl::StatusOr<PhaseResult> Load();
  // The workload's mix (the run phase). Assumes the records are loaded.
  absl::StatusOr<PhaseResult> Run();
  // --verify only: reads back every key this run acknowledged a change of,
  // and checks it holds that write or a later one, or is absent after a
  // delete ("reads_checked" keys, "mismatches"; "lost" of them absent
  // though written). A read that fails is retried for `patience` (servers
  // may be restarting), then counted in "errors".
  absl::StatusOr<PhaseResult> Check(absl::Duration patience);

 private:
  struct Worker;
  struct Phase;
  // Opens a driver per thread, runs the threads with a progress line every
  // second, and adds up what they did.
  absl::StatusOr<PhaseResult> RunPhase(const std::string& name, bool load);
  absl::StatusOr<std::vector<std::unique_ptr<Worker>>> OpenWorkers(Phase& phase);
  // A worker thread: keeps --outstanding operations in flight, paced from
  // intended start times, until the phase's quota or deadline.
  void RunWorker(Phase& phase, Worker& w);
  // Starts the mix's next operation; false once a load has handed out
  // every record.
  bool StartNextOp(Phase& phase, Worker& w, absl::Time intended);
  // Puts, inserts and deletes; `then` runs when the store has answered.
  void StartWrite(Worker& w, int64_t k, Op op, Verifier::Change change, absl::Time intended,
                  std::function<void()> then);
  void StartRead(const Phase& phase, Worker& w, int64_t k, Op op, absl::Time intended);
  // Until every worker is done.
  void ReportProgress(const Phase& phase,
                      const std::vector<std::unique_ptr<Worker>>& workers) const;
  PhaseResult Summarize(const Phase& phase,
                        const std::vector<std::unique_ptr<Worker>>& workers) const;

  const RunConfig config_;
  std::unique_ptr<Verifier> verifier_;
  int64_t key_end_ = 0;  // Key numbers written so far are below this.
};

}  // namespace rkv::bench

#endif  // RKV_BENCH_KVBENCH_RUNNER_H_
