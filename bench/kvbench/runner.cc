#include "bench/kvbench/runner.h"

#include <atomic>
#include <deque>
#include <ostream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"

namespace rkv::bench {

struct Benchmark::Worker {
  Worker(int id, uint64_t seed, const OpChooser& ops) : id(id), rng(seed), ops(ops) {}

  // Owner-thread counters that the progress reporter reads.
  static void Count(std::atomic<uint64_t>& c) {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // Every operation's latency runs from its intended start: when pacing
  // falls behind, the queueing counts too (no coordinated omission).
  void Finish(Op op, absl::Time intended, const absl::Status& s) {
    latency_ns[static_cast<int>(op)].Record(
        static_cast<uint64_t>(absl::ToInt64Nanoseconds(MonotonicNow() - intended)));
    if (!s.ok()) {
      if (errors.load(std::memory_order_relaxed) == 0) {
        first_error = absl::StrCat(OpName(op), ": ", s.ToString());
      }
      Count(errors);
    }
    Count(done);
  }

  // Adds this thread's counts, latencies and costs to the phase's.
  void AddTo(PhaseResult& r) const {
    r.operations += done.load();
    if (r.errors == 0) r.first_error = first_error;
    r.errors += errors.load();
    r.not_found += not_found;
    r.acked_writes += acked_writes;
    r.acked_inserts += acked_inserts;
    r.insert_exists += insert_exists;
    r.acked_deletes += acked_deletes;
    r.delete_absent += delete_absent;
    r.reads_checked += reads_checked;
    if (r.mismatches == 0) r.first_mismatch = first_mismatch;
    r.mismatches += mismatches;
    r.lost += lost;
    for (int i = 0; i < kOps; ++i) r.latency_ns[i].Merge(latency_ns[i]);
    if (auto after = driver->costs(); after && costs_before) {
      if (!r.costs) r.costs.emplace();
      for (int i = 0; i < kOpTypes; ++i) {
        OpCosts& sum = (*r.costs)[i];
        const OpCosts& a = (*after)[i];
        const OpCosts& b = (*costs_before)[i];
        sum.ops += a.ops - b.ops;
        sum.round_trips += a.round_trips - b.round_trips;
        sum.requests += a.requests - b.requests;
        sum.bytes += a.bytes - b.bytes;
        sum.retries += a.retries - b.retries;
      }
    }
    if (auto after = driver->stats(); after && stats_before) {
      if (!r.stats) r.stats.emplace();
      for (int i = 0; i < kOpTypes; ++i) {
        OpStats& sum = (*r.stats)[i];
        const OpStats& a = (*after)[i];
        const OpStats& b = (*stats_before)[i];
        for (int o = 0; o < kOpOutcomes; ++o) sum.outcomes[o] += a.outcomes[o] - b.outcomes[o];
        for (int k = 0; k < kLatencyBuckets; ++k) {
          sum.latency_buckets[k] += a.latency_buckets[k] - b.latency_buckets[k];
        }
        sum.latency_sum += a.latency_sum - b.latency_sum;
      }
    }
  }

  const int id;
  std::unique_ptr<Driver> driver;
  Rng rng;
  OpChooser ops;
  std::optional<KeyChooser> keys;
  std::array<Histogram, kOps> latency_ns;
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> errors{0};
  uint64_t not_found = 0;
  uint64_t acked_writes = 0;
  uint64_t acked_inserts = 0;
  uint64_t insert_exists = 0;
  uint64_t acked_deletes = 0;
  uint64_t delete_absent = 0;
  uint64_t reads_checked = 0;
  uint64_t mismatches = 0;
  uint64_t lost = 0;
  std::string first_mismatch;
  std::string first_error;
  std::optional<std::array<OpCosts, kOpTypes>> costs_before;
  std::optional<std::array<OpStats, kOpTypes>> stats_before;
  std::deque<int64_t> deleted;  // Keys this thread deleted, for its inserts to bring back.
};

// What the worker threads of one phase share.
struct Benchmark::Phase {
  Phase(const RunConfig& c, std::string name, bool load)
      : name(std::move(name)),
        load(load),
        deletes(!load && c.workload.proportions[static_cast<int>(Op::kDelete)] > 0),
        inserts(load ? 0 : c.records),
        rate(c.target_ops > 0 ? c.target_ops / c.threads : 0),
        running(c.threads) {}

  // Once every worker has its driver: connecting is not part of the phase.
  void StartClock(const RunConfig& c) {
    t0 = MonotonicNow() + absl::Milliseconds(10);
    deadline =
        !load && c.duration > absl::ZeroDuration() ? t0 + c.duration : absl::InfiniteFuture();
  }

  const std::string name;
  const bool load;
  // A mix with deletes exercises rkv's Insert and Delete: keys may be
  // absent, and inserts are rkv Inserts, which bring back keys the thread
  // deleted before they make new ones (so the key space keeps its size).
  const bool deletes;
  // Load: every record once, handed out to whichever thread is free. Run:
  // new keys continue after the records.
  InsertSequence inserts;
  const double rate;  // Operations per second per thread; 0: unpaced.
  std::atomic<int> running;
  absl::Time t0;
  absl::Time deadline;
};

namespace {

// The operations a thread issues when the run is bounded by a count.
uint64_t Quota(int64_t total, int threads, int id) {
  return static_cast<uint64_t>(total / threads + (id < total % threads ? 1 : 0));
}

// YCSB sizes the zipfian key space by the operation count; a run bounded
// by time sizes it as if it issued as many operations as there are records.
int64_t ExpectedInserts(const RunConfig& c) {
  double total_share = 0;
  for (double p : c.workload.proportions) total_share += p;
  const double insert_share = c.workload.proportions[static_cast<int>(Op::kInsert)] / total_share;
  return static_cast<int64_t>(static_cast<double>(c.operations > 0 ? c.operations : c.records) *
                              insert_share);
}

}  // namespace

Benchmark::Benchmark(RunConfig config, std::unique_ptr<Verifier> verifier)
    : config_(std::move(config)), verifier_(std::move(verifier)) {}

absl::StatusOr<PhaseResult> Benchmark::Load() { return RunPhase("load", /*load=*/true); }
absl::StatusOr<PhaseResult> Benchmark::Run() { return RunPhase("run", /*load=*/false); }

absl::StatusOr<PhaseResult> Benchmark::RunPhase(const std::string& name, bool load) {
  Phase phase(config_, name, load);
  absl::StatusOr<std::vector<std::unique_ptr<Worker>>> workers = OpenWorkers(phase);
  if (!workers.ok()) return workers.status();
  phase.StartClock(config_);
  std::vector<std::thread> threads;
  for (auto& w : *workers) threads.emplace_back([this, &phase, &w] { RunWorker(phase, *w); });
  ReportProgress(phase, *workers);
  for (std::thread& t : threads) t.join();
  key_end_ = std::max(key_end_, load ? config_.records : phase.inserts.last() + 1);
  return Summarize(phase, *workers);
}

absl::StatusOr<std::vector<std::unique_ptr<Benchmark::Worker>>> Benchmark::OpenWorkers(
    Phase& phase) {
  const RunConfig& c = config_;
  std::array<double, kOps> load_mix{};
  load_mix[static_cast<int>(Op::kInsert)] = 1;
  const OpChooser chooser(phase.load ? load_mix : c.workload.proportions);
  const int64_t expected_inserts = phase.load ? 0 : ExpectedInserts(c);
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < c.threads; ++i) {
    auto w = std::make_unique<Worker>(
        i, c.seed * 0x9E3779B97F4A7C15ULL + (phase.load ? 0 : 7919) + i, chooser);
    absl::StatusOr<std::unique_ptr<Driver>> d = c.open_driver();
    if (!d.ok()) return d.status();
    w->driver = *std::move(d);
    if (!phase.load) {
      w->keys.emplace(c.workload.distribution, c.records, expected_inserts, phase.inserts);
    }
    w->costs_before = w->driver->costs();
    w->stats_before = w->driver->stats();
    workers.push_back(std::move(w));
  }
  return workers;
}

void Benchmark::RunWorker(Phase& phase, Worker& w) {
  const RunConfig& c = config_;
  const uint64_t quota =
      phase.load || c.operations == 0 ? UINT64_MAX : Quota(c.operations, c.threads, w.id);
  const absl::Duration interval =
      phase.rate > 0 ? absl::Seconds(1.0 / phase.rate) : absl::ZeroDuration();
  absl::Time next_intended = phase.t0;
  uint64_t started = 0;
  bool stopping = false;
  absl::SleepFor(phase.t0 - MonotonicNow());
  for (;;) {
    while (!stopping && w.driver->in_flight() < static_cast<size_t>(c.outstanding)) {
      const absl::Time now = MonotonicNow();
      if (now >= phase.deadline || started >= quota) {
        stopping = true;
        break;
      }
      absl::Time intended = now;
      if (phase.rate > 0) {
        if (now < next_intended) break;
        intended = next_intended;
        next_intended += interval;
      }
      if (!StartNextOp(phase, w, intended)) {
        stopping = true;
        break;
      }
      ++started;
    }
    if (stopping && w.driver->in_flight() == 0) break;
    if (w.driver->in_flight() == 0 && phase.rate > 0) {
      absl::SleepFor(next_intended - MonotonicNow());
      continue;
    }
    w.driver->Poll(absl::Milliseconds(1));
  }
  phase.running.fetch_sub(1);
}

bool Benchmark::StartNextOp(Phase& phase, Worker& w, absl::Time intended) {
  const Op op = w.ops.Next(w.rng);
  if (op == Op::kInsert && phase.deletes && !w.deleted.empty()) {
    StartWrite(w, w.deleted.front(), op, Verifier::Change::kInsert, intended, nullptr);
    w.deleted.pop_front();
  } else if (op == Op::kInsert) {
    const int64_t k = phase.inserts.Next();
    if (phase.load && k >= config_.records) return false;
    InsertSequence& inserts = phase.inserts;
    StartWrite(w, k, op, phase.deletes ? Verifier::Change::kInsert : Verifier::Change::kPut,
               intended, [&inserts, k] { inserts.Acknowledge(k); });
  } else if (op == Op::kUpdate) {
    StartWrite(w, w.keys->Next(w.rng), op, Verifier::Change::kPut, intended, nullptr);
  } else if (op == Op::kDelete) {
    const int64_t k = w.keys->Next(w.rng);
    StartWrite(w, k, op, Verifier::Change::kDelete, intended, [&w, k] { w.deleted.push_back(k); });
  } else {
    StartRead(phase, w, w.keys->Next(w.rng), op, intended);
  }
  return true;
}

void Benchmark::StartWrite(Worker& w, int64_t k, Op op, Verifier::Change change,
                           absl::Time intended, std::function<void()> then) {
  const RunConfig& c = config_;
  const std::string key = KeyName(k, c.key_prefix);
  const Verifier::WriteTicket ticket =
      verifier_ ? verifier_->StartWrite(k, change) : Verifier::WriteTicket{0, 0};
  auto done = [this, &w, k, key, op, change, intended, ticket, then](absl::Status s) {
    const absl::Status bad =
        verifier_ ? verifier_->FinishWrite(k, key, ticket, s) : absl::OkStatus();
    const bool exists = change == Verifier::Change::kInsert && absl::IsAlreadyExists(s);
    const bool absent = change == Verifier::Change::kDelete && absl::IsNotFound(s);
    const bool found_absent = absent || (change == Verifier::Change::kInsert && s.ok());
    if (change == Verifier::Change::kDelete) {
      w.acked_deletes += s.ok();
      w.delete_absent += absent;
    } else {
      w.acked_writes += s.ok();
      w.acked_inserts += s.ok() && change == Verifier::Change::kInsert;
      w.insert_exists += exists;
    }
    // AlreadyExists and NotFound are answers here, not errors.
    if (exists || absent) s = absl::OkStatus();
    if (!bad.ok()) {
      if (w.mismatches++ == 0) w.first_mismatch = std::string(bad.message());
      // Found absent after a write of it was acknowledged.
      if (found_absent) ++w.lost;
      s = bad;
    }
    if (then) then();
    w.Finish(op, intended, s);
  };
  if (change == Verifier::Change::kDelete) {
    w.driver->Delete(key, std::move(done));
    return;
  }
  const std::string value =
      EncodeValue(key, verifier_ ? verifier_->nonce() : 0, ticket.version, c.value_size);
  if (change == Verifier::Change::kInsert) {
    w.driver->Insert(key, value, std::move(done));
  } else {
    w.driver->Write(key, value, std::move(done));
  }
}

void Benchmark::StartRead(const Phase& phase, Worker& w, int64_t k, Op op, absl::Time intended) {
  const std::string key = KeyName(k, config_.key_prefix);
  const Verifier::ReadTicket ticket =
      verifier_ ? verifier_->StartRead(k) : Verifier::ReadTicket{0, false};
  w.driver->Read(key,
                 [this, &phase, &w, k, key, op, intended, ticket](absl::StatusOr<std::string> v) {
                   // Without deletes, reads only ask for loaded or acknowledged keys:
                   // absent is an error, as in YCSB. With them, absent is an answer.
                   absl::Status s = v.status();
                   if (absl::IsNotFound(s)) {
                     ++w.not_found;
                     if (phase.deletes) s = absl::OkStatus();
                   }
                   if (verifier_ && (v.ok() || absl::IsNotFound(v.status()))) {
                     // Absent after an acknowledged write is a lost write.
                     ++w.reads_checked;
                     if (absl::Status bad = verifier_->Check(k, key, ticket, v); !bad.ok()) {
                       if (w.mismatches++ == 0) w.first_mismatch = std::string(bad.message());
                       if (absl::IsNotFound(v.status())) ++w.lost;
                       s = bad;
                     }
                   }
                   // An RMW continues with its write when the read found a value.
                   if (op == Op::kReadModifyWrite && v.ok() && s.ok()) {
                     StartWrite(w, k, op, Verifier::Change::kPut, intended, nullptr);
                   } else {
                     w.Finish(op, intended, s);
                   }
                 });
}

void Benchmark::ReportProgress(const Phase& phase,
                               const std::vector<std::unique_ptr<Worker>>& workers) const {
  const RunConfig& c = config_;
  // Ops/s over the last second, the p99 so far, errors so far.
  uint64_t last_done = 0;
  absl::Time last = phase.t0;
  while (phase.running.load() > 0) {
    absl::SleepFor(absl::Milliseconds(50));
    const absl::Time now = MonotonicNow();
    if (now - last < absl::Seconds(1) || c.progress == nullptr) continue;
    uint64_t done = 0, errors = 0;
    Histogram all;
    for (auto& w : workers) {
      done += w->done.load(std::memory_order_relaxed);
      errors += w->errors.load(std::memory_order_relaxed);
      for (const Histogram& h : w->latency_ns) all.Merge(h);
    }
    const double rate_now =
        static_cast<double>(done - last_done) / absl::ToDoubleSeconds(now - last);
    *c.progress << absl::StrFormat(
        "%-4s %6.1f s %10d ops %10.0f ops/s   p99 %9.1f us   errors %d\n", phase.name,
        absl::ToDoubleSeconds(now - phase.t0), done, rate_now,
        static_cast<double>(all.Percentile(99)) / 1e3, errors);
    c.progress->flush();
    last_done = done;
    last = now;
  }
}

PhaseResult Benchmark::Summarize(const Phase& phase,
                                 const std::vector<std::unique_ptr<Worker>>& workers) const {
  PhaseResult r;
  r.phase = phase.name;
  r.seconds = absl::ToDoubleSeconds(MonotonicNow() - phase.t0);
  for (const auto& w : workers) w->AddTo(r);
  return r;
}

absl::StatusOr<PhaseResult> Benchmark::Check(absl::Duration patience) {
  PhaseResult r;
  r.phase = "check";
  if (!verifier_) return absl::FailedPreconditionError("the check needs --verify");
  absl::StatusOr<std::unique_ptr<Driver>> driver = config_.open_driver();
  if (!driver.ok()) return driver.status();
  Driver& d = **driver;
  std::deque<int64_t> todo;
  for (int64_t k = 0; k < key_end_; ++k) {
    if (verifier_->StartRead(k).acked) todo.push_back(k);
  }
  const absl::Time start = MonotonicNow(), deadline = start + patience;
  std::deque<int64_t> retry;
  while (!todo.empty() || !retry.empty() || d.in_flight() > 0) {
    if (todo.empty() && d.in_flight() == 0) {
      if (MonotonicNow() > deadline) break;
      absl::SleepFor(absl::Milliseconds(100));  // Give a restarting server time.
      todo.swap(retry);
    }
    while (!todo.empty() && d.in_flight() < static_cast<size_t>(config_.outstanding)) {
      const int64_t k = todo.front();
      todo.pop_front();
      const std::string key = KeyName(k, config_.key_prefix);
      const Verifier::ReadTicket ticket = verifier_->StartRead(k);
      d.Read(key, [&, k, key, ticket](absl::StatusOr<std::string> v) {
        if (!v.ok() && !absl::IsNotFound(v.status())) {
          retry.push_back(k);
          return;
        }
        ++r.operations;
        ++r.reads_checked;
        if (absl::Status s = verifier_->Check(k, key, ticket, v); !s.ok()) {
          if (r.mismatches++ == 0) r.first_mismatch = std::string(s.message());
          if (!v.ok()) ++r.lost;
        }
      });
    }
    d.Poll(absl::Milliseconds(1));
  }
  r.errors = retry.size() + todo.size();
  if (r.errors > 0)
    r.first_error = absl::StrCat(r.errors, " keys unreadable for ", absl::FormatDuration(patience));
  r.seconds = absl::ToDoubleSeconds(MonotonicNow() - start);
  return r;
}

}  // namespace rkv::bench
