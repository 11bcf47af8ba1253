// Micro-benchmark of the fabric over loopback: doorbells/s and requests/s
// for 8-byte READs at batch sizes 1, 8 and 32, and bytes/s for 64 KiB
// READs. Each iteration posts one batch (one doorbell, last request
// signaled) and waits for its completion, so one iteration is one round trip.
//
//   build/bin/fabric_bench [--fabric=soft] [--benchmark_repetitions=5]
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "benchmark/benchmark.h"
#include "common/fabric/fabric.h"
#include "common/fabric/fabric_flags.h"
#include "common/flags.h"
#include "common/logging.h"

namespace rkv::fabric {
namespace {

constexpr size_t kRegionBytes = 64 << 20;

// A target and an initiator in this process, connected over the fabric.
struct Loopback {
  std::unique_ptr<Fabric> target, initiator;
  std::vector<uint8_t> remote_mem, local_mem;
  std::unique_ptr<MemoryRegion> remote, local;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<QueuePair> qp;
};

Loopback& Setup() {
  static Loopback* lb = [] {
    auto options = FabricOptionsFromFlags();
    RKV_CHECK(options.ok()) << options.status();
    auto* l = new Loopback;
    auto t = OpenFabric(*options);
    auto i = OpenFabric(*options);
    RKV_CHECK(t.ok() && i.ok()) << (t.ok() ? i.status() : t.status());
    l->target = std::move(*t);
    l->initiator = std::move(*i);
    l->remote_mem.resize(kRegionBytes);
    l->local_mem.resize(kRegionBytes);
    l->remote = *l->target->RegisterMemory(l->remote_mem.data(), kRegionBytes, kAllAccess);
    l->local = *l->initiator->RegisterMemory(l->local_mem.data(), kRegionBytes, kLocalWrite);
    auto listener = l->target->Listen({"127.0.0.1:0", ""});
    RKV_CHECK(listener.ok()) << listener.status();
    l->listener = std::move(*listener);
    auto qp = l->initiator->Connect(l->listener->endpoint());
    RKV_CHECK(qp.ok()) << qp.status();
    l->qp = std::move(*qp);
    return l;
  }();
  return *lb;
}

void RoundTrip(Loopback& lb, std::vector<WorkRequest>& batch, benchmark::State& state) {
  if (!lb.qp->Post(batch).ok()) {
    state.SkipWithError("post failed");
    return;
  }
  Completion c;
  if (lb.qp->Wait({&c, 1}, absl::Seconds(10)) != 1 || c.status != CompletionStatus::kSuccess) {
    state.SkipWithError("no successful completion");
  }
}

std::vector<WorkRequest> ReadBatch(Loopback& lb, int n, uint32_t size) {
  std::vector<WorkRequest> batch;
  for (int i = 0; i < n; ++i) {
    const uint64_t off = (static_cast<uint64_t>(i) * size) % (kRegionBytes - size);
    WorkRequest wr = WorkRequest::Read(i, lb.local_mem.data() + off, size, lb.local->lkey(),
                                       lb.remote->remote_base() + off, lb.remote->rkey());
    wr.flags = i + 1 == n ? kSignaled : 0;  // Selective signaling.
    batch.push_back(wr);
  }
  return batch;
}

void BM_Read8B(benchmark::State& state) {
  Loopback& lb = Setup();
  const int n = static_cast<int>(state.range(0));
  std::vector<WorkRequest> batch = ReadBatch(lb, n, 8);
  for (auto _ : state) RoundTrip(lb, batch, state);
  state.counters["doorbells/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["requests/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Read8B)->ArgName("batch")->Arg(1)->Arg(8)->Arg(32)->UseRealTime();

void BM_Read64KiB(benchmark::State& state) {
  Loopback& lb = Setup();
  std::vector<WorkRequest> batch = ReadBatch(lb, 1, 64 << 10);
  for (auto _ : state) RoundTrip(lb, batch, state);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (64 << 10));
}
BENCHMARK(BM_Read64KiB)->UseRealTime();

}  // namespace
}  // namespace rkv::fabric

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // Takes the --benchmark_* flags first.
  rkv::ParseFlags(argc, argv,
                  "fabric_bench: doorbells/s, requests/s and bytes/s of one-sided READs over "
                  "loopback.\nUsage: fabric_bench [--fabric=auto|verbs|soft] [--benchmark_*]");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
