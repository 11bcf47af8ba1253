#include "tests/client/region/kv_test_env.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/region/region_client.h"
#include "common/status.h"
#include "server/kvserver/replica_takeover.h"
#include "tests/common/fabric/verbs_test_setup.h"

namespace rkv::testing {

std::string KvBackendName(KvBackend b) {
  switch (b) {
    case KvBackend::kSoftTcp:
      return "soft_tcp";
    case KvBackend::kSoftSim:
      return "soft_sim";
    case KvBackend::kVerbs:
      return "verbs";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<KvTestEnv>> KvTestEnv::Create(
    KvBackend backend, const server::RegionServerOptions& server_options, uint64_t sim_seed,
    int replicas) {
  auto env = std::make_unique<KvTestEnv>();
  env->backend = backend;
  fabric::FabricOptions fo;
  fo.kind = fabric::FabricKind::kSoft;
  server::RegionServerOptions so = server_options;
  if (backend == KvBackend::kSoftSim) {
    env->sim = std::make_shared<fabric::SimNetwork>(sim_seed);
    so.listen_address = "server";
    so.lease_thread = false;  // The simulation runs on one thread, on its own clock.
  } else if (backend == KvBackend::kVerbs) {
    RKV_ASSIGN_OR_RETURN(fabric::testing::VerbsTestSetup setup,
                         fabric::testing::VerbsTestSetupFromEnv());
    fo.kind = fabric::FabricKind::kVerbs;
    fo.rdma_device = setup.target_device;
    so.listen_address = setup.address;
    env->client_rdma_device = setup.initiator_device;
    // rxe in an emulated guest moves a MiB in hundreds of milliseconds, and
    // a reader whose block read outlasts the grace period starts over.
    so.grace_period = std::max(so.grace_period, absl::Seconds(3));
  }
  if (env->sim != nullptr) {
    env->server_fabric = env->sim->NewFabric();
  } else {
    RKV_ASSIGN_OR_RETURN(env->server_fabric, fabric::OpenFabric(fo));
  }
  RKV_ASSIGN_OR_RETURN(env->server, server::RegionServer::Create(*env->server_fabric, so));
  for (int r = 1; r < replicas; ++r) {
    server::RegionServerOptions bo = so;
    if (env->sim != nullptr) bo.listen_address = absl::StrCat("backup", r);
    bo.reclaim = false;  // As kvserver: the primary runs the census for the group.
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<server::RegionServer> backup,
                         server::RegionServer::Create(*env->server_fabric, bo));
    env->backups.push_back(std::move(backup));
  }
  env->reclaim_ = so.reclaim;
  env->SetBackups();
  return env;
}

void KvTestEnv::SetBackups() {
  std::vector<fabric::RemoteRegion> regions;
  for (const auto& b : backups) regions.push_back(b->address());
  server->SetReclaim(reclaim_, std::move(regions));
}

absl::Status KvTestEnv::FailOver() {
  if (backups.empty()) return absl::FailedPreconditionError("no backup to take over");
  server = std::move(backups.front());
  backups.erase(backups.begin());
  std::vector<uint8_t*> copies = {server->MemoryForTesting()};
  for (const auto& b : backups) copies.push_back(b->MemoryForTesting());
  RKV_RETURN_IF_ERROR(server::TakeOver(copies, server->layout()).status());
  SetBackups();
  return absl::OkStatus();
}

client_internal::OpenOptions KvTestEnv::client_options() const {
  client_internal::OpenOptions o;
  o.fabric_kind = backend == KvBackend::kVerbs ? "verbs" : "soft";
  o.rdma_device = client_rdma_device;
  o.scratch_bytes = 4 << 20;
  if (sim != nullptr) {
    // A node of its own, and its choices drawn from the simulation's seed.
    o.fabric = sim->NewFabric();
    o.seed = sim->NextSeed();
    // Simulated time: one scheduler step is one microsecond.
    std::shared_ptr<fabric::SimNetwork> net = sim;
    o.clock = [net] { return absl::UnixEpoch() + absl::Microseconds(net->steps()); };
  }
  return o;
}

absl::StatusOr<std::unique_ptr<client_internal::RegionClient>> KvTestEnv::NewClient(
    client_internal::OpenOptions options, const client_internal::BrokenProtocol& broken) {
  if (backups.empty()) return client_internal::OpenBroken(server->address(), options, broken);
  std::vector<fabric::RemoteRegion> regions = {server->address()};
  for (const auto& b : backups) regions.push_back(b->address());
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<client_internal::ClientResources> resources,
                       client_internal::ClientResources::Create(options));
  return client_internal::OpenReplicatedSession(regions, options, broken, std::move(resources));
}

}  // namespace rkv::testing
