// kvcoord: rkv's control plane. Tracks the servers of a cluster (leases,
// heartbeats) and serves the cluster map to clients. With --state_file its
// membership and map epoch survive restarts.
#include <csignal>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"
#include "common/file_limit.h"
#include "common/flags.h"
#include "common/logging.h"
#include "grpcpp/grpcpp.h"
#include "server/kvcoord/coordinator_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7400", "Address to serve gRPC on (port 0: any free).");
ABSL_FLAG(int, lease_ms, 3000, "A server that sends no heartbeat for this long is marked down.");
ABSL_FLAG(std::string, port_file, "", "If set, write the port actually bound here.");
ABSL_FLAG(std::string, state_file, "",
          "Keep the membership and the map epoch in this file, so that a restarted kvcoord "
          "serves the map it had and clients follow it. Without one, a restart forgets the "
          "cluster until servers check in again, and running clients ignore the new map "
          "until its epoch passes the old one.");

ABSL_FLAG(uint32_t, replicas, 1,
          "Copies of every key (1 to 3): the servers form replica groups of this many, each "
          "holding mirrored copies of one region; a group that loses a server goes on with the "
          "others and takes a spare server when one is up. Fixed for the life of a state file.");

namespace {
volatile std::sig_atomic_t g_stop = 0;
}

int main(int argc, char** argv) {
  rkv::ParseFlags(argc, argv,
                  "kvcoord: the rkv coordinator (membership, leases, cluster map).\n"
                  "Usage: kvcoord [--listen=HOST:PORT] [--lease_ms=MS] [--state_file=F] "
                  "[--replicas=R] [--token=T|--token_file=F]");
  if (absl::Status s = rkv::EnsureFileLimit(256); !s.ok()) {
    std::cerr << "kvcoord: " << s.message() << "\n";
    return 1;
  }
  auto token = rkv::ClusterTokenFromFlags();
  if (!token.ok()) {
    std::cerr << "kvcoord: " << token.status().message() << "\n";
    return 2;
  }
  const int lease_ms = absl::GetFlag(FLAGS_lease_ms);
  if (lease_ms < 50 || lease_ms > 600000) {
    std::cerr << "kvcoord: --lease_ms must be between 50 and 600000\n";
    return 2;
  }
  const uint32_t replicas = absl::GetFlag(FLAGS_replicas);
  if (replicas < 1 || replicas > 3) {
    std::cerr << "kvcoord: --replicas must be 1, 2 or 3\n";
    return 2;
  }
  if (replicas > 1 && absl::GetFlag(FLAGS_state_file).empty()) {
    // Which server holds which group's copy is known only to the
    // coordinator: one that forgot would take them all for spares.
    std::cerr << "kvcoord: --replicas above 1 needs --state_file\n";
    return 2;
  }
  rkv::server::CoordinatorService service(*token, absl::Milliseconds(lease_ms),
                                          absl::GetFlag(FLAGS_state_file), replicas);
  if (absl::Status s = service.Recover(); !s.ok()) {
    std::cerr << "kvcoord: " << s.message() << "\n";
    return 1;
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "kvcoord: cannot listen on " << absl::GetFlag(FLAGS_listen) << "\n";
    return 1;
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_port_file)) << port << "\n";
  }
  RKV_LOG(INFO) << "kvcoord serving on port " << port << ", lease " << lease_ms << " ms"
                << (token->empty() ? ", NO cluster token (anyone may register)" : "");
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  while (!g_stop) absl::SleepFor(absl::Milliseconds(50));
  RKV_LOG(INFO) << "kvcoord stopping";
  service.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
