// A server region and clients on one fabric backend, for the KV tests.
#ifndef RKV_TESTS_KV_KV_TEST_ENV_H_
#define RKV_TESTS_KV_KV_TEST_ENV_H_

#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "common/fabric/sim_network.h"
#include "rkv/client.h"
#include "server/region_server.h"

namespace rkv::testing {

enum class KvBackend { kSoftTcp, kSoftSim };
inline void PrintTo(KvBackend b, std::ostream* os) {
  *os << (b == KvBackend::kSoftTcp ? "soft_tcp" : "soft_sim");
}

class KvTestEnv {
 public:
  static absl::StatusOr<std::unique_ptr<KvTestEnv>> Create(
      KvBackend backend, const server::RegionServerOptions& server_options = {},
      uint64_t sim_seed = 1);

  // Options for a client of this environment: its fabric, and in the
  // simulation a clock that advances with the scheduler.
  ClientOptions client_options() const;
  absl::StatusOr<std::unique_ptr<Client>> NewClient(ClientOptions options);
  absl::StatusOr<std::unique_ptr<Client>> NewClient() { return NewClient(client_options()); }

  KvBackend backend;
  std::shared_ptr<fabric::SimNetwork> sim;
  std::unique_ptr<fabric::Fabric> server_fabric;
  std::unique_ptr<server::RegionServer> server;
};

}  // namespace rkv::testing

#endif  // RKV_TESTS_KV_KV_TEST_ENV_H_
