#include "tests/kv/kv_test_env.h"

#include "common/status.h"

namespace rkv::testing {

absl::StatusOr<std::unique_ptr<KvTestEnv>> KvTestEnv::Create(
    KvBackend backend, const server::RegionServerOptions& server_options, uint64_t sim_seed) {
  auto env = std::make_unique<KvTestEnv>();
  env->backend = backend;
  fabric::FabricOptions fo;
  fo.kind = fabric::FabricKind::kSoft;
  server::RegionServerOptions so = server_options;
  if (backend == KvBackend::kSoftSim) {
    env->sim = std::make_shared<fabric::SimNetwork>(sim_seed);
    fo.sim = env->sim;
    so.listen_address = "server";
  }
  RKV_ASSIGN_OR_RETURN(env->server_fabric, fabric::OpenFabric(fo));
  RKV_ASSIGN_OR_RETURN(env->server, server::RegionServer::Create(*env->server_fabric, so));
  return env;
}

ClientOptions KvTestEnv::client_options() const {
  ClientOptions o;
  o.fabric.kind = fabric::FabricKind::kSoft;
  o.scratch_bytes = 4 << 20;
  if (sim != nullptr) {
    o.fabric.sim = sim;
    // Simulated time: one scheduler step is one microsecond.
    std::shared_ptr<fabric::SimNetwork> net = sim;
    o.clock = [net] { return absl::UnixEpoch() + absl::Microseconds(net->steps()); };
  }
  return o;
}

absl::StatusOr<std::unique_ptr<Client>> KvTestEnv::NewClient(ClientOptions options) {
  return Client::Open(server->address(), options);
}

}  // namespace rkv::testing
