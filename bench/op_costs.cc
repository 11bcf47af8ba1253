// op_costs: what each rkv operation costs on the wire — round trips,
// requests and bytes — measured against an in-process server. These are the
// hardware-independent figures to compare with RACE (GET 2, INSERT 3) and
// FUSEE, and they must be the same on every fabric.
//
//   build/bin/op_costs [--keys=N] [--value_size=B] [--json]
//   build/bin/op_costs --fabric=verbs --listen=IP:0 [--rdma_device=D]
//                      [--client_rdma_device=D]
#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/region/region_client.h"
#include "common/fabric/fabric.h"
#include "common/fabric/fabric_flags.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "rkv/client.h"
#include "server/kvserver/region_server.h"

ABSL_FLAG(int, keys, 5000, "Keys loaded, and operations measured per type.");
ABSL_FLAG(int, value_size, 100, "Value size in bytes.");
ABSL_FLAG(bool, json, false, "Print one JSON object instead of a table.");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "The in-process server's address (verbs: an address of an RDMA interface).");
ABSL_FLAG(std::string, client_rdma_device, "",
          "verbs: the clients' RDMA device (default: --rdma_device).");
ABSL_FLAG(bool, check_budgets, false,
          "Exit 1 unless the round-trip budgets hold at p50: GET cold <= 2, GET cached 1, "
          "INSERT <= 3 (<= 4 with --replicas above 1), UPDATE and DELETE <= 3; and the load "
          "factor at full >= 0.85.");
ABSL_FLAG(int, replicas, 1,
          "Copies of the region (1 to 3): servers of one geometry whose regions the clients "
          "use as mirrors, the first the primary.");

namespace rkv {
namespace {

struct Samples {
  std::vector<uint64_t> round_trips, requests, bytes;
};

// Runs `op` and records what it cost, from the client's counters.
absl::Status Measure(Client& c, OpType type, Samples& out,
                     const std::function<absl::Status()>& op) {
  const OpCosts before = c.costs(type);
  absl::Status s = op();
  const OpCosts after = c.costs(type);
  out.round_trips.push_back(after.round_trips - before.round_trips);
  out.requests.push_back(after.requests - before.requests);
  out.bytes.push_back(after.bytes - before.bytes);
  return s;
}

// The clients' fabric: the server's, but for the device.
fabric::FabricOptions ClientFabric(fabric::FabricOptions server) {
  if (const std::string d = absl::GetFlag(FLAGS_client_rdma_device); !d.empty()) {
    server.rdma_device = d;
  }
  return server;
}

// A client of `servers`' regions: one region, or the copies of one.
absl::StatusOr<std::unique_ptr<Client>> NewClient(
    const std::vector<std::unique_ptr<server::RegionServer>>& servers, bool cache) {
  client_internal::OpenOptions o;
  RKV_ASSIGN_OR_RETURN(const fabric::FabricOptions fo, fabric::FabricOptionsFromFlags());
  o.fabric_kind = fabric::FabricKindName(fo.kind);
  o.rdma_device = ClientFabric(fo).rdma_device;
  o.cache_entries = cache ? 1 << 20 : 0;
  if (servers.size() == 1) return client_internal::OpenRegion(servers[0]->address(), o);
  std::vector<fabric::RemoteRegion> regions;
  for (const auto& s : servers) regions.push_back(s->address());
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<client_internal::ClientResources> resources,
                       client_internal::ClientResources::Create(o));
  return client_internal::OpenReplicatedSession(regions, o, {}, std::move(resources));
}

// The share of index slots in use when the first insert into a small
// region fails for want of a slot.
absl::StatusOr<double> LoadFactorAtFull(fabric::Fabric& f) {
  std::vector<std::unique_ptr<server::RegionServer>> servers(1);
  RKV_ASSIGN_OR_RETURN(
      servers[0], server::RegionServer::Create(f, {.region_bytes = 8 << 20,
                                                   .index_share = 0.03,
                                                   .listen_address = absl::GetFlag(FLAGS_listen)}));
  const server::RegionServer* server = servers[0].get();
  RKV_ASSIGN_OR_RETURN(auto client, NewClient(servers, false));
  for (uint64_t i = 0;; ++i) {
    absl::Status s = client->Insert(absl::StrCat("fill", i), "v");
    if (absl::IsResourceExhausted(s)) return static_cast<double>(i) / server->layout().slots();
    if (!s.ok()) return s;
  }
}

int Run() {
  const int n = absl::GetFlag(FLAGS_keys);
  const std::string value(absl::GetFlag(FLAGS_value_size), 'v');
  auto options = fabric::FabricOptionsFromFlags();
  RKV_CHECK(options.ok()) << options.status();
  auto f = fabric::OpenFabric(*options);
  RKV_CHECK(f.ok()) << f.status();
  const int replicas = absl::GetFlag(FLAGS_replicas);
  if (replicas < 1 || replicas > 3) {
    std::cerr << "op_costs: --replicas is 1 to 3, not " << replicas << "\n";
    return 2;
  }
  std::vector<std::unique_ptr<server::RegionServer>> servers;
  for (int r = 0; r < replicas; ++r) {
    auto server = server::RegionServer::Create(
        **f, {.region_bytes = 256 << 20, .listen_address = absl::GetFlag(FLAGS_listen)});
    RKV_CHECK(server.ok()) << server.status();
    servers.push_back(std::move(server).value());
  }
  auto loader = NewClient(servers, true);
  RKV_CHECK(loader.ok()) << loader.status();
  auto key = [](int i) { return absl::StrCat("user", i); };
  for (int i = 0; i < n; ++i) RKV_CHECK((*loader)->Insert(key(i), value).ok());

  std::map<std::string, Samples> results;
  auto cold = NewClient(servers, false);
  auto warm = NewClient(servers, true);
  RKV_CHECK(cold.ok() && warm.ok());
  for (int i = 0; i < n; ++i) {
    RKV_CHECK(Measure(**cold, OpType::kGet, results["get_cold"], [&] {
                return (*cold)->Get(key(i)).status();
              }).ok());
    RKV_CHECK((*warm)->Get(key(i)).ok());  // Fills the cache.
    RKV_CHECK(Measure(**warm, OpType::kGet, results["get_cached"], [&] {
                return (*warm)->Get(key(i)).status();
              }).ok());
    RKV_CHECK(Measure(**cold, OpType::kInsert, results["insert"], [&] {
                return (*cold)->Insert(key(n + i), value);
              }).ok());
    RKV_CHECK(Measure(**cold, OpType::kPut, results["update"], [&] {
                return (*cold)->Put(key(i), value);
              }).ok());
    RKV_CHECK((*warm)->Get(key(n + i)).ok());
    RKV_CHECK(Measure(**warm, OpType::kPut, results["update_cached"], [&] {
                return (*warm)->Put(key(n + i), value);
              }).ok());
  }
  // Deletes, cold and cached, of keys each client has not cached resp. has.
  for (int i = 0; i < n; ++i) {
    const bool cached = i % 2 == 1;
    Client& c = cached ? **warm : **cold;
    if (cached) RKV_CHECK(c.Get(key(i)).ok());
    RKV_CHECK(Measure(c, OpType::kDelete, results[cached ? "delete_cached" : "delete"], [&] {
                return c.Delete(key(i));
              }).ok());
  }
  auto load = LoadFactorAtFull(**f);
  RKV_CHECK(load.ok()) << load.status();

  auto p50 = [](std::vector<uint64_t> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto max = [](const std::vector<uint64_t>& v) { return *std::max_element(v.begin(), v.end()); };
  auto mean = [](const std::vector<uint64_t>& v) {
    double s = 0;
    for (uint64_t x : v) s += x;
    return s / v.size();
  };
  int exit_code = 0;
  if (absl::GetFlag(FLAGS_check_budgets)) {
    const std::pair<const char*, uint64_t> budgets[] = {{"get_cold", 2},
                                                        {"get_cached", 1},
                                                        {"insert", replicas > 1 ? 4u : 3u},
                                                        {"update", 3},
                                                        {"delete", 3}};
    for (const auto& [name, most] : budgets) {
      if (p50(results[name].round_trips) > most) {
        std::cerr << "budget exceeded: " << name << " p50 " << p50(results[name].round_trips)
                  << " > " << most << "\n";
        exit_code = 1;
      }
    }
    if (*load < 0.85) {
      std::cerr << "load factor at full " << *load << " < 0.85\n";
      exit_code = 1;
    }
  }
  const char* order[] = {"get_cold",      "get_cached", "insert",       "update",
                         "update_cached", "delete",     "delete_cached"};
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << "{";
    for (const char* name : order) {
      const Samples& s = results[name];
      std::cout << absl::StrFormat(
          "\"%s\": {\"rtt_p50\": %d, \"rtt_max\": %d, \"requests_mean\": %.2f, "
          "\"bytes_mean\": %.1f}, ",
          name, p50(s.round_trips), max(s.round_trips), mean(s.requests), mean(s.bytes));
    }
    std::cout << absl::StrFormat(
        "\"load_factor_at_full\": %.3f, \"keys\": %d, \"value_size\": %d, \"replicas\": %d, "
        "\"fabric\": \"%s\"}\n",
        *load, n, static_cast<int>(value.size()), replicas, fabric::FabricKindName((*f)->kind()));
    return exit_code;
  }
  std::cout << absl::StrFormat("%d keys of %d-byte values, %d cop%s of the region, %s fabric\n\n",
                               n, static_cast<int>(value.size()), replicas,
                               replicas == 1 ? "y" : "ies", fabric::FabricKindName((*f)->kind()));
  std::cout << absl::StrFormat("%-14s %8s %8s %14s %11s\n", "operation", "RTT p50", "RTT max",
                               "requests mean", "bytes mean");
  for (const char* name : order) {
    const Samples& s = results[name];
    std::cout << absl::StrFormat("%-14s %8d %8d %14.2f %11.1f\n", name, p50(s.round_trips),
                                 max(s.round_trips), mean(s.requests), mean(s.bytes));
  }
  std::cout << absl::StrFormat("\nload factor at the first failed insert: %.3f\n", *load);
  return exit_code;
}

}  // namespace
}  // namespace rkv

int main(int argc, char** argv) {
  rkv::ParseFlags(argc, argv,
                  "op_costs: round trips, requests and bytes of each rkv operation.\n"
                  "Usage: op_costs [--keys=N] [--value_size=B] [--replicas=1..3] [--json]\n"
                  "       [--check_budgets]\n"
                  "       [--fabric=soft|verbs] [--listen=IP:0] [--rdma_device=D]\n"
                  "       [--client_rdma_device=D]");
  return rkv::Run();
}
