// fabric_demo: two processes and one-sided RDMA between them.
//
//   fabric_demo serve  --descriptor=FILE    registers a region, listens, and
//                                           writes the region's descriptor
//   fabric_demo client --descriptor=FILE    READs, WRITEs and CASes that
//                                           region; prints round trips and
//                                           throughput
//
// The serving process's own threads never look at a request: its fabric
// (the soft fabric's virtual NIC, or the RDMA NIC) executes them.
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/fabric/fabric.h"
#include "common/fabric/fabric_flags.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "common/status.h"
#include "google/protobuf/text_format.h"
#include "rkvpb/fabric.pb.h"

ABSL_FLAG(std::string, descriptor, "/tmp/rkv-fabric-demo.region",
          "serve: where to write the region descriptor; client: where to read it.");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "serve: address to listen on (port 0: any free).");
ABSL_FLAG(std::string, token, "demo", "Connection token the server requires.");
ABSL_FLAG(uint64_t, region_mib, 64, "serve: size of the registered region in MiB.");
ABSL_FLAG(double, seconds, 2.0, "client: length of each throughput phase in seconds.");
ABSL_FLAG(int, max_serve_seconds, 600, "serve: exit after this long even if not stopped.");

namespace rkv {
namespace {

using fabric::Completion;
using fabric::CompletionStatus;
using fabric::WorkRequest;

volatile std::sig_atomic_t g_stop = 0;

constexpr char kUsage[] =
    "fabric_demo: one-sided READ/WRITE/CAS between two processes.\n"
    "Usage:\n"
    "  fabric_demo serve  [--descriptor=FILE] [--listen=HOST:PORT] [--fabric=...]\n"
    "  fabric_demo client [--descriptor=FILE] [--seconds=N] [--fabric=...]";

int Serve() {
  auto options = fabric::FabricOptionsFromFlags();
  if (!options.ok()) {
    std::cerr << options.status().message() << "\n";
    return 2;
  }
  auto f = fabric::OpenFabric(*options);
  if (!f.ok()) {
    std::cerr << "fabric_demo: " << f.status().message() << "\n";
    return 1;
  }
  const size_t bytes = absl::GetFlag(FLAGS_region_mib) << 20;
  std::vector<uint8_t> memory(bytes);
  auto region = (*f)->RegisterMemory(memory.data(), bytes, fabric::kAllAccess);
  if (!region.ok()) {
    std::cerr << "fabric_demo: " << region.status().message() << "\n";
    return 1;
  }
  auto listener = (*f)->Listen({absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_token)});
  if (!listener.ok()) {
    std::cerr << "fabric_demo: " << listener.status().message() << "\n";
    return 1;
  }
  proto::RegionDescriptor d;
  d.mutable_endpoint()->set_kind(fabric::FabricKindName((*f)->kind()));
  d.mutable_endpoint()->set_address((*listener)->endpoint().address);
  d.set_base_address((*region)->remote_base());
  d.set_length((*region)->length());
  d.set_rkey((*region)->rkey());
  d.set_generation(1);
  std::string text;
  google::protobuf::TextFormat::PrintToString(d, &text);
  const std::string path = absl::GetFlag(FLAGS_descriptor);
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {  // Readers never see half a file.
    std::cerr << "fabric_demo: cannot write " << path << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  RKV_LOG(INFO) << "serving " << (bytes >> 20) << " MiB on " << d.endpoint().address() << " ("
                << d.endpoint().kind() << " fabric), rkey " << d.rkey() << "; descriptor in "
                << path;
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  // This thread only waits: the data path needs no CPU of this process.
  const absl::Time deadline =
      MonotonicNow() + absl::Seconds(absl::GetFlag(FLAGS_max_serve_seconds));
  while (!g_stop && MonotonicNow() < deadline) absl::SleepFor(absl::Milliseconds(50));
  std::remove(path.c_str());
  RKV_LOG(INFO) << "stopped";
  return 0;
}

class Client {
 public:
  Client(fabric::Fabric& f, fabric::QueuePair& qp, const proto::RegionDescriptor& d)
      : qp_(qp), d_(d), local_mem_(1 << 20) {
    local_ = std::move(f.RegisterMemory(local_mem_.data(), local_mem_.size(), fabric::kLocalWrite))
                 .value();
  }

  uint8_t* buf(size_t off = 0) { return local_mem_.data() + off; }

  WorkRequest Read(uint64_t id, uint64_t off, void* dst, uint32_t len) {
    return WorkRequest::Read(id, dst, len, local_->lkey(), d_.base_address() + off, d_.rkey());
  }
  WorkRequest Write(uint64_t id, uint64_t off, const void* src, uint32_t len) {
    return WorkRequest::Write(id, src, len, local_->lkey(), d_.base_address() + off, d_.rkey());
  }
  WorkRequest Cas(uint64_t id, uint64_t off, uint64_t* old, uint64_t expect, uint64_t swap) {
    return WorkRequest::Cas(id, old, local_->lkey(), d_.base_address() + off, d_.rkey(), expect,
                            swap);
  }

  // Posts one doorbell and waits for `signaled` completions.
  absl::Status RoundTrip(const std::vector<WorkRequest>& batch, size_t signaled) {
    if (absl::Status s = qp_.Post(batch); !s.ok()) return s;
    Completion c[64];
    for (size_t got = 0; got < signaled;) {
      const size_t n = qp_.Wait(absl::MakeSpan(c), absl::Seconds(10));
      if (n == 0) return absl::DeadlineExceededError("no completion within 10 s");
      for (size_t i = 0; i < n; ++i) {
        if (c[i].status != CompletionStatus::kSuccess) {
          return absl::InternalError(absl::StrCat("request ", c[i].wr_id, ": ",
                                                  fabric::CompletionStatusName(c[i].status)));
        }
      }
      got += n;
    }
    return absl::OkStatus();
  }

  // Back-to-back doorbells of `batch` READs of `size` bytes for `seconds`.
  absl::Status Throughput(int batch, uint32_t size, double seconds) {
    std::vector<WorkRequest> wrs;
    for (int i = 0; i < batch; ++i) {
      WorkRequest w = Read(i, (uint64_t{4096} + uint64_t(i) * size) % (d_.length() - size),
                           buf((uint64_t(i) * size) % (local_mem_.size() - size)), size);
      w.flags = i + 1 == batch ? fabric::kSignaled : 0;
      wrs.push_back(w);
    }
    const fabric::QueuePairCounters before = qp_.counters();
    const absl::Time start = MonotonicNow();
    std::vector<double> rtt_us;
    while (MonotonicNow() - start < absl::Seconds(seconds)) {
      const absl::Time t0 = MonotonicNow();
      if (absl::Status s = RoundTrip(wrs, 1); !s.ok()) return s;
      rtt_us.push_back(absl::ToDoubleMicroseconds(MonotonicNow() - t0));
    }
    const double elapsed = absl::ToDoubleSeconds(MonotonicNow() - start);
    const fabric::QueuePairCounters after = qp_.counters();
    std::sort(rtt_us.begin(), rtt_us.end());
    const double doorbells = static_cast<double>(after.doorbells - before.doorbells);
    std::cout << absl::StrFormat(
        "  READ %7u B x %2d/doorbell: %9.0f doorbells/s %10.0f requests/s %9.1f MiB/s  "
        "round trip p50 %6.1f us p99 %6.1f us\n",
        size, batch, doorbells / elapsed, (after.requests - before.requests) / elapsed,
        (after.bytes - before.bytes) / elapsed / (1 << 20), rtt_us[rtt_us.size() / 2],
        rtt_us[rtt_us.size() * 99 / 100]);
    return absl::OkStatus();
  }

 private:
  fabric::QueuePair& qp_;
  const proto::RegionDescriptor d_;
  std::vector<uint8_t> local_mem_;
  std::unique_ptr<fabric::MemoryRegion> local_;
};

absl::Status RunClient() {
  RKV_ASSIGN_OR_RETURN(fabric::FabricOptions options, fabric::FabricOptionsFromFlags());
  const std::string path = absl::GetFlag(FLAGS_descriptor);
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("no descriptor at ", path, " (is `fabric_demo serve` running?)"));
  std::stringstream text;
  text << in.rdbuf();
  proto::RegionDescriptor d;
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &d)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a region descriptor"));
  }
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<fabric::Fabric> f, fabric::OpenFabric(options));
  if (d.endpoint().kind() != fabric::FabricKindName(f->kind())) {
    return absl::FailedPreconditionError(
        absl::StrCat("the server runs the ", d.endpoint().kind(),
                     " fabric; pass --fabric=", d.endpoint().kind()));
  }
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<fabric::QueuePair> qp,
                       f->Connect({d.endpoint().address(), absl::GetFlag(FLAGS_token)}));
  Client c(*f, *qp, d);
  std::cout << "connected to " << d.endpoint().address() << " (" << d.endpoint().kind()
            << " fabric), region of " << (d.length() >> 20) << " MiB, rkey " << d.rkey() << "\n";

  // WRITE a message, READ it back: 2 round trips.
  const std::string msg = "hello from a one-sided WRITE";
  std::memcpy(c.buf(0), msg.data(), msg.size());
  RKV_RETURN_IF_ERROR(c.RoundTrip({c.Write(1, 0, c.buf(0), msg.size())}, 1));
  RKV_RETURN_IF_ERROR(c.RoundTrip({c.Read(2, 0, c.buf(4096), msg.size())}, 1));
  std::cout << "  WRITE then READ: \""
            << std::string(reinterpret_cast<char*>(c.buf(4096)), msg.size()) << "\"\n";

  // CAS-increment a counter 1000 times; CAS returns the old value either way.
  auto* old = reinterpret_cast<uint64_t*>(c.buf(8192));
  RKV_RETURN_IF_ERROR(c.RoundTrip({c.Read(3, 1024, old, 8)}, 1));
  uint64_t guess = *old, start = *old, cas_round_trips = 0;
  for (int done = 0; done < 1000; ++cas_round_trips) {
    RKV_RETURN_IF_ERROR(c.RoundTrip({c.Cas(4, 1024, old, guess, guess + 1)}, 1));
    if (*old == guess) {
      guess++;
      done++;
    } else {
      guess = *old;  // Someone else moved it: retry from what CAS returned.
    }
  }
  std::cout << "  CAS counter " << start << " -> " << guess << " in " << cas_round_trips
            << " round trips\n";

  const double seconds = absl::GetFlag(FLAGS_seconds);
  for (int batch : {1, 8, 32}) RKV_RETURN_IF_ERROR(c.Throughput(batch, 8, seconds));
  RKV_RETURN_IF_ERROR(c.Throughput(1, 64 << 10, seconds));
  const fabric::QueuePairCounters total = qp->counters();
  std::cout << "  total: " << total.doorbells << " round trips, " << total.requests << " requests, "
            << total.bytes << " bytes, " << total.error_completions << " errors\n";
  return absl::OkStatus();
}

}  // namespace
}  // namespace rkv

int main(int argc, char** argv) {
  std::vector<char*> args = rkv::ParseFlags(argc, argv, rkv::kUsage);
  const std::string mode = args.size() == 2 ? args[1] : "";
  if (mode == "serve") return rkv::Serve();
  if (mode == "client") {
    absl::Status s = rkv::RunClient();
    if (!s.ok()) {
      std::cerr << "fabric_demo: " << s.message() << "\n";
      return 1;
    }
    return 0;
  }
  std::cerr << rkv::kUsage << "\n";
  return 2;
}
