// The cluster token: a shared secret that the coordinator requires on every
// call and that a server's soft fabric requires in its handshake. Given by
// --token or --token_file (the file keeps it out of `ps`).
#ifndef RKV_COMMON_CLUSTER_TOKEN_H_
#define RKV_COMMON_CLUSTER_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"

namespace rkv {

// With neither flag set, reads `default_file` if it exists (tools pass the
// file scripts/cluster.sh writes, so that a local cluster needs no flags).
absl::StatusOr<std::string> ClusterTokenFromFlags(const std::string& default_file = "");

}  // namespace rkv

#endif  // RKV_COMMON_CLUSTER_TOKEN_H_
