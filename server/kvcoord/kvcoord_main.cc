// kvcoord: rkv's control plane. Tracks the servers of a cluster (leases,
// heartbeats) and serves the cluster map to clients. With --etcd its state
// lives in etcd and several kvcoords run, one leading; with --state_file
// one kvcoord keeps it in a file.
#include <csignal>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster_token.h"
#include "common/file_limit.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/metrics_endpoint.h"
#include "grpcpp/grpcpp.h"
#include "server/kvcoord/coordinator_metrics.h"
#include "server/kvcoord/coordinator_service.h"
#include "server/kvcoord/etcd/etcd_client.h"
#include "server/kvcoord/etcd_state_store.h"
#include "server/kvcoord/file_state_store.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7400", "Address to serve gRPC on (port 0: any free).");
ABSL_FLAG(int, lease_ms, 3000,
          "A server that sends no heartbeat for this long is marked down. With --etcd the "
          "coordinators' leadership is timed from it too: a standby takes over a third of a "
          "lease after the leader falls silent.");
ABSL_FLAG(std::string, port_file, "", "If set, write the port actually bound here.");
ABSL_FLAG(std::string, state_file, "",
          "One kvcoord alone: keep the membership and the map epoch in this file, so that a "
          "restarted kvcoord serves the map it had and clients follow it. Without it or "
          "--etcd, a restart forgets the cluster until servers check in again.");
ABSL_FLAG(std::string, etcd, "",
          "Keep the state in etcd at these client endpoints (host:port, comma-separated): "
          "run two or three kvcoords with the same --etcd and --etcd_prefix; one leads, the "
          "others stand by and take over when it is lost.");
ABSL_FLAG(std::string, etcd_prefix, "/rkv", "With --etcd: the keys of this cluster.");
ABSL_FLAG(std::string, etcd_cacert, "", "With --etcd: CA certificate (PEM) of etcd's TLS.");
ABSL_FLAG(std::string, etcd_cert, "", "With --etcd: client certificate (PEM) for etcd.");
ABSL_FLAG(std::string, etcd_key, "", "With --etcd: the client certificate's key (PEM).");
ABSL_FLAG(std::string, import_state_file, "",
          "With --etcd: if etcd holds no state under --etcd_prefix yet, start from this "
          "--state_file of a one-process kvcoord (moving a running cluster to etcd in place).");
ABSL_FLAG(std::string, id, "", "This coordinator's name (default: its --advertise address).");
ABSL_FLAG(std::string, advertise, "",
          "The address servers and clients reach this kvcoord at (default: --listen, with the "
          "port bound).");

ABSL_FLAG(std::string, metrics_listen, "",
          "Serve Prometheus metrics at http://HOST:PORT/metrics (e.g. 127.0.0.1:9465; port 0: "
          "any free, logged); empty: none. Bind it to localhost or a private network.");
ABSL_FLAG(uint32_t, replicas, 1,
          "Copies of every key (1 to 3): the servers form replica groups of this many, each "
          "holding mirrored copies of one region; a group that loses a server goes on with the "
          "others and takes a spare server when one is up. Fixed for the life of the state.");

namespace {

volatile std::sig_atomic_t g_stop = 0;

int Fail(int code, const absl::Status& s) {
  std::cerr << "kvcoord: " << s.message() << "\n";
  return code;
}

absl::StatusOr<std::unique_ptr<rkv::server::StateStore>> MakeStore(const std::string& id,
                                                                   const std::string& address,
                                                                   absl::Duration lease) {
  const std::string endpoints = absl::GetFlag(FLAGS_etcd);
  if (endpoints.empty()) {
    return std::make_unique<rkv::server::FileStateStore>(absl::GetFlag(FLAGS_state_file));
  }
  rkv::server::etcd::EtcdOptions eo;
  eo.endpoints = absl::StrSplit(endpoints, ',', absl::SkipEmpty());
  eo.ca_file = absl::GetFlag(FLAGS_etcd_cacert);
  eo.cert_file = absl::GetFlag(FLAGS_etcd_cert);
  eo.key_file = absl::GetFlag(FLAGS_etcd_key);
  // A member that does not answer within a small part of the leadership's
  // budget (a third of a lease) is left for the next.
  eo.call_timeout = std::clamp(lease / 10, absl::Milliseconds(50), absl::Milliseconds(500));
  eo.total_timeout = std::clamp(lease / 4, absl::Milliseconds(200), absl::Seconds(2));
  auto client = rkv::server::etcd::EtcdClient::Create(std::move(eo));
  if (!client.ok()) return client.status();
  rkv::server::EtcdStoreOptions so;
  so.prefix = absl::GetFlag(FLAGS_etcd_prefix);
  so.id = id;
  so.address = address;
  so.lease = lease;
  if (const std::string f = absl::GetFlag(FLAGS_import_state_file); !f.empty()) {
    auto state = rkv::server::FileStateStore::Read(f);
    if (!state.ok()) return state.status();
    if (state->epoch() == 0) return absl::NotFoundError(absl::StrCat("no state file at ", f));
    so.import = *std::move(state);
  }
  return std::make_unique<rkv::server::EtcdStateStore>(*std::move(client), std::move(so));
}

absl::Status CheckFlags() {
  const bool etcd = !absl::GetFlag(FLAGS_etcd).empty();
  if (etcd && !absl::GetFlag(FLAGS_state_file).empty()) {
    return absl::InvalidArgumentError(
        "--state_file and --etcd exclude each other (--import_state_file moves a state file "
        "into etcd)");
  }
  if (!etcd && !absl::GetFlag(FLAGS_import_state_file).empty()) {
    return absl::InvalidArgumentError("--import_state_file needs --etcd");
  }
  const std::string prefix = absl::GetFlag(FLAGS_etcd_prefix);
  if (prefix.empty() || prefix[0] != '/' || prefix.back() == '/') {
    return absl::InvalidArgumentError("--etcd_prefix must start with '/' and not end with one");
  }
  for (const std::string& name : {absl::GetFlag(FLAGS_id), absl::GetFlag(FLAGS_advertise)}) {
    if (name.find_first_of(" ,") != std::string::npos) {
      return absl::InvalidArgumentError("--id and --advertise may hold no space or comma");
    }
  }
  const uint32_t replicas = absl::GetFlag(FLAGS_replicas);
  if (replicas < 1 || replicas > 3)
    return absl::InvalidArgumentError("--replicas must be 1, 2 or 3");
  if (replicas > 1 && absl::GetFlag(FLAGS_state_file).empty() && !etcd) {
    // Which server holds which group's copy is known only to the
    // coordinators: one that forgot would take them all for spares.
    return absl::InvalidArgumentError(
        "--replicas above 1 needs --etcd (or, for one kvcoord alone, --state_file)");
  }
  const int lease_ms = absl::GetFlag(FLAGS_lease_ms);
  if (lease_ms < 50 || lease_ms > 600000) {
    return absl::InvalidArgumentError("--lease_ms must be between 50 and 600000");
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  rkv::ParseFlags(argc, argv,
                  "kvcoord: the rkv coordinator (membership, leases, cluster map).\n"
                  "Usage: kvcoord [--listen=HOST:PORT] [--lease_ms=MS] [--replicas=R]\n"
                  "               [--etcd=HOST:PORT,... [--etcd_prefix=P] [--id=NAME]\n"
                  "                [--advertise=HOST:PORT] | --state_file=F]\n"
                  "               [--token=T|--token_file=F] [--metrics_listen=127.0.0.1:9465]");
  if (absl::Status s = rkv::EnsureFileLimit(256); !s.ok()) return Fail(1, s);
  auto token = rkv::ClusterTokenFromFlags();
  if (!token.ok()) return Fail(2, token.status());
  if (absl::Status s = CheckFlags(); !s.ok()) return Fail(2, s);
  const absl::Duration lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  rkv::server::Coordinator coordinator({lease, absl::GetFlag(FLAGS_replicas)});
  rkv::server::CoordinatorService service(coordinator, *token);
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "kvcoord: cannot listen on " << listen << "\n";
    return 1;
  }
  const std::string address = absl::GetFlag(FLAGS_advertise).empty()
                                  ? absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port)
                                  : absl::GetFlag(FLAGS_advertise);
  if (!absl::GetFlag(FLAGS_etcd).empty() && absl::GetFlag(FLAGS_advertise).empty() &&
      (absl::StartsWith(listen, "0.0.0.0:") || absl::StartsWith(listen, "[::]:"))) {
    // Standbys send servers and clients to the leader's address.
    return Fail(2, absl::InvalidArgumentError(
                       "--listen on every address needs --advertise (where others reach it)"));
  }
  const std::string id = absl::GetFlag(FLAGS_id).empty() ? address : absl::GetFlag(FLAGS_id);
  auto store = MakeStore(id, address, lease);
  if (!store.ok()) return Fail(2, store.status());
  if (absl::Status s = coordinator.Start(id, address, *std::move(store)); !s.ok()) {
    return Fail(1, s);
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_port_file)) << port << "\n";
  }
  RKV_LOG(INFO) << "kvcoord " << id << " serving on port " << port << ", lease "
                << absl::GetFlag(FLAGS_lease_ms) << " ms"
                << (absl::GetFlag(FLAGS_etcd).empty() ? "" : ", state in etcd")
                << (token->empty() ? ", NO cluster token (anyone may register)" : "");
  std::unique_ptr<rkv::MetricsEndpoint> metrics;
  if (const std::string at = absl::GetFlag(FLAGS_metrics_listen); !at.empty()) {
    auto started = rkv::MetricsEndpoint::Start(at, [&coordinator] {
      return rkv::server::RenderCoordinatorMetrics(coordinator.MetricsSnapshot());
    });
    if (!started.ok()) return Fail(1, started.status());
    metrics = std::move(started).value();
    RKV_LOG(INFO) << "kvcoord " << id << ": metrics at http://" << metrics->address() << "/metrics";
  }
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  absl::Status status;
  while (!g_stop && (status = coordinator.status()).ok()) absl::SleepFor(absl::Milliseconds(50));
  RKV_LOG(INFO) << "kvcoord stopping";
  metrics.reset();
  coordinator.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return status.ok() ? 0 : Fail(2, status);
}
