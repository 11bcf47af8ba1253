// What a client is opened with inside this tree: the public ClientOptions,
// and what only programs and tests of the tree give it — a fabric they
// opened themselves (a simulated or fault-injecting one, or one shared by
// many clients) and a clock (a simulated one on the deterministic fabric).
// Neither is part of the installed API: an application names its fabric by
// kind and runs on real time.
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
};

}  // namespace client_internal
}  // namespace rkv

#endif  // RKV_CLIENT_SESSION_OPEN_OPTIONS_H_
