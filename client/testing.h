// Hooks that break the client's protocol on purpose, so that tests can show
// the linearizability checker catches what they break. Not installed.
#ifndef RKV_CLIENT_TESTING_H_
#define RKV_CLIENT_TESTING_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/fabric/types.h"
#include "rkv/client.h"

namespace rkv::client_internal {

struct BrokenProtocol {
  // Concurrent inserts of one key do not settle which claim wins.
  bool skip_conflict_resolution = false;
  // Blocks are taken as whole without checking their checksum.
  bool skip_block_checksum = false;
};

// Client::Open, with the protocol broken as `broken` says.
absl::StatusOr<std::unique_ptr<Client>> OpenBroken(const fabric::RemoteRegion& region,
                                                   const ClientOptions& options,
                                                   const BrokenProtocol& broken);

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_TESTING_H_
