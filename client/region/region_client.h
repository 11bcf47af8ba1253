// A session with one server's region — or with the mirrored copies of one
// region, the primary first — that runs operations' rounds over it (the
// protocol in client/protocol/) with shared doorbells. It is the cluster
// client's session with one replica group, which reaches it as a
// RegionSession (region_session.h); and a Client of its own, for the
// tests, benchmarks and tools that open one region without a coordinator.
#ifndef RKV_CLIENT_REGION_REGION_CLIENT_H_
#define RKV_CLIENT_REGION_REGION_CLIENT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/region/region_session.h"
#include "client/session/broken_protocol.h"
#include "client/session/client_resources.h"
#include "client/session/open_options.h"
#include "common/fabric/types.h"
#include "rkv/client.h"

namespace rkv::client_internal {

class RegionClient : public Client, public RegionSession {
 public:
  // Both bases name these; one implementation serves both.
  using Client::costs;
  using Client::in_flight;
  using Client::Poll;

  // The connection's own counters: doorbells here count shared rounds once.
  virtual fabric::QueuePairCounters connection_counters() const = 0;
};

// Connects to one server's region (its address comes from the server) and
// reads its header. Keys up to 1 KiB; values up to 1 MiB.
absl::StatusOr<std::unique_ptr<RegionClient>> OpenRegion(const fabric::RemoteRegion& region,
                                                         const OpenOptions& options);

// OpenRegion, with the protocol broken as `broken` says.
absl::StatusOr<std::unique_ptr<RegionClient>> OpenBroken(const fabric::RemoteRegion& region,
                                                         const OpenOptions& options,
                                                         const BrokenProtocol& broken);

// A session with one server's region on shared resources: its queue pair,
// layout and heap allocator are its own. The sessions keep the resources
// alive, so their queue pairs go before the memory they write.
absl::StatusOr<std::unique_ptr<RegionClient>> OpenSession(
    const fabric::RemoteRegion& region, const OpenOptions& options, const BrokenProtocol& broken,
    std::shared_ptr<ClientResources> resources);
// The same for a region kept in several mirrored copies (Session::replicas),
// the primary first: one queue pair per copy, all on the resources'
// completion channel, and each round's share of a copy under one doorbell.
absl::StatusOr<std::unique_ptr<RegionClient>> OpenReplicatedSession(
    const std::vector<fabric::RemoteRegion>& replicas, const OpenOptions& options,
    const BrokenProtocol& broken, std::shared_ptr<ClientResources> resources);

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_REGION_REGION_CLIENT_H_
