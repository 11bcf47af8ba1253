// What a client is opened with inside this tree: the public ClientOptions,
// and what only programs and tests of the tree give it — a fabric they
// opened themselves (a simulated or fault-injecting one, or one shared by
// many clients), a clock (a simulated one on the deterministic fabric),
// and for a cluster client where its maps come from and where its
// connects run (the simulation feeds maps itself and runs everything on
// its one thread). None is part of the installed API: an application names
// its fabric by kind, runs on real time and follows its coordinators.
#ifndef RKV_CLIENT_SESSION_OPEN_OPTIONS_H_
#define RKV_CLIENT_SESSION_OPEN_OPTIONS_H_

#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "common/monotonic_clock.h"
#include "rkv/client.h"

namespace rkv {
namespace fabric {
class Fabric;
}  // namespace fabric

namespace client_internal {

// The cluster client's (client/cluster/map_source.h, executor.h).
class MapSource;
class Executor;

struct OpenOptions : ClientOptions {
  OpenOptions() = default;
  // Explicit, and OpenOptions goes nowhere a ClientOptions is taken: a
  // conversion either way would drop or forget the fabric and the clock.
  explicit OpenOptions(const ClientOptions& options) : ClientOptions(options) {}

  // A fabric to use instead of opening `fabric_kind`; clients may share
  // one (it is thread-safe).
  std::shared_ptr<fabric::Fabric> fabric;
  // The time source (empty: the machine's monotonic clock).
  Clock clock;
  // A cluster client's source of maps (empty: the coordinators it is
  // opened on, over gRPC). One client's: it takes the maps.
  std::shared_ptr<MapSource> map_source;
  // Makes a cluster client's executor, for its connects and map fetches
  // (empty: two threads of its own). A factory, not an executor: the
  // executor's jobs name the client, so it is the client's to destroy
  // first.
  std::function<std::unique_ptr<Executor>()> executor;
};

}  // namespace client_internal
}  // namespace rkv

#endif  // RKV_CLIENT_SESSION_OPEN_OPTIONS_H_
