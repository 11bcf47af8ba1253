// The cluster token: a shared secret that the coordinator requires on every
// call and that a server's soft fabric requires in its handshake. Given by
// --token or --token_file (the file keeps it out of `ps`).
#ifndef RKV_COMMON_CLUSTER_TOKEN_H_
#define RKV_COMMON_CLUSTER_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"

namespace rkv {

absl::StatusOr<std::string> ClusterTokenFromFlags();

}  // namespace rkv

#endif  // RKV_COMMON_CLUSTER_TOKEN_H_
