// kvserver: an rkv storage node. Lays out one region (in a file, if asked,
// so that a restart keeps every key), registers it with the fabric, joins
// the cluster at the coordinator and renews its lease. Then it stays out of
// the way: clients reach the region with one-sided RDMA only.
#include <csignal>
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"
#include "common/fabric/fabric_flags.h"
#include "common/file_limit.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/metrics_endpoint.h"
#include "proto/coordinator_stub.h"
#include "server/kvserver/member_agent.h"
#include "server/kvserver/region_server.h"
#include "server/kvserver/server_metrics.h"

ABSL_FLAG(std::string, coordinator, rkv::kDefaultCoordinator,
          "Every kvcoord's gRPC address, comma-separated: the server renews its lease with "
          "whichever leads.");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "Address the fabric listens on for clients' queue pairs (port 0: any free).");
ABSL_FLAG(std::string, memory, "64MiB",
          "Region size (index and heap), e.g. 256MiB or 4GiB. With an existing "
          "--region_file it must match the file's size.");
ABSL_FLAG(double, index_share, 0.25, "Share of the region given to the hash index.");
ABSL_FLAG(std::string, region_file, "",
          "Keep the region in this file (shared mapping): a restart serves every key "
          "stored before, even after kill -9. Empty: memory only, lost on exit.");
ABSL_FLAG(std::string, id, "", "This server's id, stable across restarts (it places keys).");
ABSL_FLAG(absl::Duration, grace_period, absl::Milliseconds(200),
          "How long clients wait before they reuse a block they replaced or deleted, and so "
          "how long a reader may trust what it read: longer than any stall a client may "
          "suffer mid-read (and than the fabric's retry budget). Every client of the region "
          "uses this one.");
ABSL_FLAG(absl::Duration, client_lease, absl::Seconds(5),
          "How long a client session lives without renewing its lease (clients renew every "
          "quarter lease while they poll). Then the server fences it: none of its requests "
          "executes here any more, so that what it held can go to others. Longer than any "
          "pause a live client may suffer; 0 keeps no leases (clients of older builds).");
ABSL_FLAG(uint32_t, session_slots, 4096,
          "Client sessions the server can hold leases for at once; a client beyond them is "
          "refused with an error that names this flag.");
ABSL_FLAG(std::string, census_report_bytes, "0",
          "With one copy, the heap a fenced client session held goes back to the free pool "
          "while the server serves: live sessions report what they hold into this much memory "
          "(8 bytes a block; 0: a 64th of the heap, 1 to 64 MiB). Too little, and the server "
          "logs that the reports outran it.");
ABSL_FLAG(uint32_t, soft_threads, 0,
          "Soft fabric: threads of the virtual NIC that execute clients' requests, each an "
          "event loop serving its share of the queue pairs (0: min(hardware threads, 4)).");

ABSL_FLAG(std::string, copy_rate, "0",
          "Replicated clusters: a ceiling per second on the bytes this server sends when it "
          "copies its region to a spare while clients keep working (e.g. 200MiB), so that "
          "the copy leaves them the network; 0: no ceiling. Copies made while its group is "
          "paused go at full speed.");
ABSL_FLAG(std::string, metrics_listen, "",
          "Serve Prometheus metrics at http://HOST:PORT/metrics (e.g. 127.0.0.1:9464; port 0: "
          "any free, logged); empty: none. Bind it to localhost or a private network: the "
          "figures are not secret, but nothing checks who asks.");

namespace {

volatile std::sig_atomic_t g_stop = 0;

int Fail(const absl::Status& s) {
  std::cerr << "kvserver: " << s.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  rkv::ParseFlags(
      argc, argv,
      "kvserver: an rkv storage node.\n"
      "Usage: kvserver --id=NAME [--coordinator=HOST:PORT,...] [--fabric=auto|verbs|soft]\n"
      "                [--memory=64MiB] [--region_file=PATH] [--token=T|--token_file=F]\n"
      "                [--soft_threads=N] [--soft_busy_poll=50us] [--copy_rate=200MiB]\n"
      "                [--grace_period=200ms] [--client_lease=5s] [--session_slots=4096]\n"
      "                [--census_report_bytes=0] [--metrics_listen=127.0.0.1:9464]");
  if (absl::Status s = rkv::EnsureFileLimit(256); !s.ok()) {
    std::cerr << "kvserver: " << s.message() << "\n";
    return 1;
  }
  const std::string id = absl::GetFlag(FLAGS_id);
  if (id.empty()) {
    std::cerr << "kvserver: --id is required (a name stable across restarts)\n";
    return 2;
  }
  auto token = rkv::ClusterTokenFromFlags();
  auto coordinators = rkv::ParseCoordinatorList(absl::GetFlag(FLAGS_coordinator));
  auto fabric_options = rkv::fabric::FabricOptionsFromFlags();
  auto bytes = rkv::ParseByteSize(absl::GetFlag(FLAGS_memory));
  auto copy_rate = rkv::ParseByteSize(absl::GetFlag(FLAGS_copy_rate));
  auto report_bytes = rkv::ParseByteSize(absl::GetFlag(FLAGS_census_report_bytes));
  for (const absl::Status& s : {token.status(), coordinators.status(), fabric_options.status(),
                                bytes.status(), copy_rate.status(), report_bytes.status()}) {
    if (!s.ok()) {
      std::cerr << "kvserver: " << s.message() << "\n";
      return 2;
    }
  }
  auto fabric = rkv::fabric::OpenFabric(*fabric_options);
  if (!fabric.ok()) return Fail(fabric.status());

  rkv::server::RegionServerOptions ro;
  ro.region_bytes = *bytes;
  ro.index_share = absl::GetFlag(FLAGS_index_share);
  ro.listen_address = absl::GetFlag(FLAGS_listen);
  ro.token = *token;
  ro.soft_threads = absl::GetFlag(FLAGS_soft_threads);
  ro.region_file = absl::GetFlag(FLAGS_region_file);
  ro.generation = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  ro.grace_period = absl::GetFlag(FLAGS_grace_period);
  ro.client_lease = absl::GetFlag(FLAGS_client_lease);
  ro.session_slots = absl::GetFlag(FLAGS_session_slots);
  ro.reclaim = false;  // Until the coordinator says this copy takes heap back (MemberAgent).
  ro.census_report_bytes = *report_bytes;
  if (ro.client_lease > absl::ZeroDuration() &&
      (ro.session_slots == 0 || ro.client_lease < 4 * ro.grace_period)) {
    std::cerr << "kvserver: --client_lease needs --session_slots > 0 and at least four grace "
                 "periods\n";
    return 2;
  }
  auto region = rkv::server::RegionServer::Create(**fabric, ro);
  if (!region.ok()) return Fail(region.status());
  const rkv::fabric::RemoteRegion addr = (*region)->address();
  RKV_LOG(INFO) << "kvserver " << id << ": " << ((*region)->recovered() ? "recovered" : "new")
                << " region of " << ((*region)->layout().region_bytes >> 20) << " MiB"
                << (ro.region_file.empty() ? "" : " in " + ro.region_file) << ", "
                << rkv::fabric::FabricKindName((*fabric)->kind()) << " fabric on "
                << addr.endpoint.address << ", generation " << (*region)->generation();

  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  rkv::CoordinatorStub coord(absl::GetFlag(FLAGS_coordinator), *token);
  rkv::server::MemberAgent agent(id, rkv::fabric::FabricKindName((*fabric)->kind()), **region,
                                 coord, *copy_rate);
  std::unique_ptr<rkv::MetricsEndpoint> metrics;
  if (const std::string at = absl::GetFlag(FLAGS_metrics_listen); !at.empty()) {
    const char* kind = rkv::fabric::FabricKindName((*fabric)->kind());
    auto started = rkv::MetricsEndpoint::Start(at, [&agent, &region, kind] {
      return rkv::server::RenderServerMetrics(agent.FreshStats(), agent.counters(),
                                              (*region)->FabricCounters(), kind);
    });
    if (!started.ok()) return Fail(started.status());
    metrics = std::move(started).value();
    RKV_LOG(INFO) << "kvserver " << id << ": metrics at http://" << metrics->address()
                  << "/metrics";
  }
  if (absl::Status s = agent.Run(&g_stop); !s.ok()) return Fail(s);
  metrics.reset();
  RKV_LOG(INFO) << "kvserver " << id << " stopping";
  if (absl::Status s = (*region)->Flush(); !s.ok()) return Fail(s);
  return 0;
}
