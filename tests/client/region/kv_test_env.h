// A server region and clients on one fabric backend, for the KV tests.
#ifndef RKV_TESTS_CLIENT_REGION_KV_TEST_ENV_H_
#define RKV_TESTS_CLIENT_REGION_KV_TEST_ENV_H_

#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/region/region_client.h"
#include "common/fabric/sim/sim_network.h"
#include "rkv/client.h"
#include "server/kvserver/region_server.h"

namespace rkv::testing {

// kVerbs runs where the verbs tests can (tests/common/fabric/verbs_test_setup.h).
enum class KvBackend { kSoftTcp, kSoftSim, kVerbs };
std::string KvBackendName(KvBackend b);
inline void PrintTo(KvBackend b, std::ostream* os) { *os << KvBackendName(b); }

class KvTestEnv {
 public:
  // verbs: Unavailable where it cannot run here (the message says why).
  // `replicas` > 1: that many servers of one geometry, whose regions
  // clients use as the mirrored copies of one region (the first primary).
  static absl::StatusOr<std::unique_ptr<KvTestEnv>> Create(
      KvBackend backend, const server::RegionServerOptions& server_options = {},
      uint64_t sim_seed = 1, int replicas = 1);

  // Options for a client of this environment: its fabric, and in the
  // simulation a clock that advances with the scheduler.
  client_internal::OpenOptions client_options() const;
  absl::StatusOr<std::unique_ptr<client_internal::RegionClient>> NewClient(
      client_internal::OpenOptions options, const client_internal::BrokenProtocol& broken);
  absl::StatusOr<std::unique_ptr<client_internal::RegionClient>> NewClient(
      client_internal::OpenOptions options) {
    return NewClient(std::move(options), {});
  }
  absl::StatusOr<std::unique_ptr<client_internal::RegionClient>> NewClient() {
    return NewClient(client_options());
  }

  KvBackend backend;
  std::shared_ptr<fabric::SimNetwork> sim;
  std::unique_ptr<fabric::Fabric> server_fabric;
  // Replicated: the primary is lost with its memory, and the first backup
  // takes over (server/kvserver/replica_takeover.h). Clients must be closed first
  // (as new rkeys would shut them out) and opened again after.
  absl::Status FailOver();

  std::unique_ptr<server::RegionServer> server;  // The primary.
  std::vector<std::unique_ptr<server::RegionServer>> backups;
  std::string client_rdma_device;  // kVerbs only.

 private:
  // Tells the primary its backups, as a replicated group's coordinator does.
  void SetBackups();
  bool reclaim_ = true;  // RegionServerOptions::reclaim.
};

}  // namespace rkv::testing

#endif  // RKV_TESTS_CLIENT_REGION_KV_TEST_ENV_H_
