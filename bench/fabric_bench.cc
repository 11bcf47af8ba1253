// Micro-benchmark of the fabric over loopback: doorbells/s and requests/s
// for 8-byte READs at batch sizes 1, 8 and 32, and bytes/s for 64 KiB
// READs. Each iteration posts one batch (one doorbell, last request
// signaled) and waits for its completion, so one iteration is one round trip.
//
// In the same run, the same round trips over a plain TCP loopback
// connection (TCP_NODELAY, blocking sockets, an echo thread on the other
// end; with --soft_busy_poll both ends spin on non-blocking reads that
// long before they block, as the fabric does): BM_Tcp8B writes a batch of 8-byte requests in one
// write and reads their 8-byte responses, which the echo thread sends back in one write;
// BM_Tcp64KiB asks for 64 KiB. That is what the kernel allows a round trip
// to cost here, and every fabric figure reads as a ratio to it: at the end
// (console output) a table gives each fabric round trip over its TCP twin.
//
//   build/bin/fabric_bench [--fabric=soft] [--soft_busy_poll=50us]
//                          [--benchmark_repetitions=5]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "common/fabric/fabric.h"
#include "common/fabric/fabric_flags.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "common/socket.h"

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
  state.counters["requests/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Read8B)->ArgName("batch")->Arg(1)->Arg(8)->Arg(32)->UseRealTime();

void BM_Read64KiB(benchmark::State& state) {
  Loopback& lb = Setup();
  std::vector<WorkRequest> batch = ReadBatch(lb, 1, 64 << 10);
  for (auto _ : state) RoundTrip(lb, batch, state);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (64 << 10));
}
BENCHMARK(BM_Read64KiB)->UseRealTime();

// The TCP baseline: a connection over loopback with TCP_NODELAY on both
// ends, and an echo thread serving it. A request is 8 bytes holding the
// size of the response it asks for (8 bytes, or 64 KiB of zeros); the echo
// thread answers every complete request a read brought in with one write.
struct TcpLoopback {
  Fd client;
  std::thread echo;
  absl::Duration busy_poll;
};

// What one recv() would give, after spinning up to `busy_poll` on
// non-blocking reads (the fabric's --soft_busy_poll, for a like-for-like
// baseline).
ssize_t Receive(int fd, void* buf, size_t len, absl::Duration busy_poll) {
  for (const absl::Time until = MonotonicNow() + busy_poll; MonotonicNow() < until;) {
    const ssize_t n = ::recv(fd, buf, len, MSG_DONTWAIT);
    if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return n;
  }
  return ::recv(fd, buf, len, 0);
}

void EchoLoop(Fd conn, absl::Duration busy_poll) {
  std::vector<uint8_t> in(64 << 10), out;
  size_t have = 0;
  for (;;) {
    const ssize_t n = Receive(conn.get(), in.data() + have, in.size() - have, busy_poll);
    if (n <= 0) return;  // The process is exiting (the client end is never closed before).
    have += static_cast<size_t>(n);
    out.clear();
    size_t used = 0;
    for (; have - used >= 8; used += 8) {
      uint64_t size;
      std::memcpy(&size, in.data() + used, 8);
      if (size == 8) {
        out.insert(out.end(), in.data() + used, in.data() + used + 8);  // Echoed.
      } else {
        out.resize(out.size() + size);
      }
    }
    std::memmove(in.data(), in.data() + used, have - used);
    have -= used;
    if (!out.empty() && !WriteFull(conn.get(), out.data(), out.size()).ok()) return;
  }
}

TcpLoopback& SetupTcp() {
  static TcpLoopback* tl = [] {
    auto listener = ListenTcp({"127.0.0.1", 0});
    RKV_CHECK(listener.ok()) << listener.status();
    auto port = LocalPort(listener->get());
    RKV_CHECK(port.ok()) << port.status();
    auto client = ConnectTcp({"127.0.0.1", *port}, absl::Seconds(10));  // With TCP_NODELAY.
    RKV_CHECK(client.ok()) << client.status();
    Fd conn(::accept(listener->get(), nullptr, nullptr));
    RKV_CHECK(conn.valid()) << "accept: " << std::strerror(errno);
    const int one = 1;
    ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto options = FabricOptionsFromFlags();
    RKV_CHECK(options.ok()) << options.status();
    auto* l = new TcpLoopback;
    l->client = std::move(*client);
    l->busy_poll = options->soft_busy_poll;
    l->echo = std::thread(EchoLoop, std::move(conn), l->busy_poll);
    l->echo.detach();
    return l;
  }();
  return *tl;
}

// One round trip: n requests for `response` bytes each, in one write; then
// every response byte read back.
void TcpRoundTrip(TcpLoopback& tl, const std::vector<uint64_t>& requests,
                  std::vector<uint8_t>& responses, benchmark::State& state) {
  if (!WriteFull(tl.client.get(), requests.data(), requests.size() * 8).ok()) {
    state.SkipWithError("TCP round trip failed");
    return;
  }
  for (size_t have = 0; have < responses.size();) {
    const ssize_t n =
        Receive(tl.client.get(), responses.data() + have, responses.size() - have, tl.busy_poll);
    if (n <= 0) {
      state.SkipWithError("TCP round trip failed");
      return;
    }
    have += static_cast<size_t>(n);
  }
}

void BM_Tcp8B(benchmark::State& state) {
  TcpLoopback& tl = SetupTcp();
  const int n = static_cast<int>(state.range(0));
  std::vector<uint64_t> requests(n, 8);
  std::vector<uint8_t> responses(static_cast<size_t>(n) * 8);
  for (auto _ : state) TcpRoundTrip(tl, requests, responses, state);
  state.counters["doorbells/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["requests/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Tcp8B)->ArgName("batch")->Arg(1)->Arg(8)->Arg(32)->UseRealTime();

void BM_Tcp64KiB(benchmark::State& state) {
  TcpLoopback& tl = SetupTcp();
  std::vector<uint64_t> requests(1, 64 << 10);
  std::vector<uint8_t> responses(64 << 10);
  for (auto _ : state) TcpRoundTrip(tl, requests, responses, state);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (64 << 10));
}
BENCHMARK(BM_Tcp64KiB)->UseRealTime();

// The console reporter, and at the end a table of each fabric benchmark's
// round trip over its TCP twin's (BM_Read8B/batch:N over BM_Tcp8B/batch:N,
// BM_Read64KiB over BM_Tcp64KiB): medians when repeated, else the one run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  using ConsoleReporter::ConsoleReporter;

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (r.run_type == Run::RT_Aggregate && !median) continue;
      if (r.run_type == Run::RT_Iteration && r.repetitions > 1) continue;
      const double us =
          r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit) * 1e6;
      round_trip_us_[r.run_name.function_name + "/" + r.run_name.args] = us;
    }
  }

  void Finalize() override {
    static constexpr const char* kPairs[][3] = {
        {"BM_Read8B/batch:1", "BM_Tcp8B/batch:1", "8 B READ, batch 1"},
        {"BM_Read8B/batch:8", "BM_Tcp8B/batch:8", "8 B READ, batch 8"},
        {"BM_Read8B/batch:32", "BM_Tcp8B/batch:32", "8 B READ, batch 32"},
        {"BM_Read64KiB/", "BM_Tcp64KiB/", "64 KiB READ"},
    };
    std::ostream& out = GetOutputStream();
    bool header = false;
    for (const auto& [fabric, tcp, label] : kPairs) {
      auto f = round_trip_us_.find(fabric), t = round_trip_us_.find(tcp);
      if (f == round_trip_us_.end() || t == round_trip_us_.end()) continue;
      if (!header) {
        out << "\nRound trip of the fabric over that of plain TCP loopback, same run "
            << "(1.00: what the kernel allows):\n"
            << absl::StrFormat("%-20s %12s %12s %8s\n", "", "fabric us", "TCP us", "ratio");
        header = true;
      }
      out << absl::StrFormat("%-20s %12.1f %12.1f %8.2f\n", label, f->second, t->second,
                             f->second / t->second);
    }
    ConsoleReporter::Finalize();
  }

 private:
  std::map<std::string, double> round_trip_us_;
};

}  // namespace
}  // namespace rkv::fabric

int main(int argc, char** argv) {
  // The ratio table comes with the console format only; JSON and CSV stay as
  // Google Benchmark writes them.
  bool console = true, tabular = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (absl::StartsWith(arg, "--benchmark_format=") && !absl::EndsWith(arg, "=console")) {
      console = false;
    }
    if (arg == "--benchmark_counters_tabular" || arg == "--benchmark_counters_tabular=true") {
      tabular = true;
    }
  }
  benchmark::Initialize(&argc, argv);  // Takes the --benchmark_* flags first.
  rkv::ParseFlags(argc, argv,
                  "fabric_bench: doorbells/s, requests/s and bytes/s of one-sided READs over "
                  "loopback, and of the same round trips over plain TCP.\n"
                  "Usage: fabric_bench [--fabric=auto|verbs|soft] [--benchmark_*]");
  if (console) {
    using Console = benchmark::ConsoleReporter;
    rkv::fabric::RatioReporter reporter(static_cast<Console::OutputOptions>(
        (isatty(STDOUT_FILENO) ? Console::OO_Color : Console::OO_None) |
        (tabular ? Console::OO_Tabular : Console::OO_None)));
    benchmark::RunSpecifiedBenchmarks(&reporter);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  return 0;
}
