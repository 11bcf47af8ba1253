// The cluster client (Client::OpenCluster), opened with what only this
// tree's programs and tests give it: a fabric of their own, a clock.
#ifndef RKV_CLIENT_CLUSTER_CLUSTER_CLIENT_H_
#define RKV_CLIENT_CLUSTER_CLUSTER_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/session/open_options.h"
#include "rkv/client.h"

namespace rkv::client_internal {

absl::StatusOr<std::unique_ptr<Client>> OpenCluster(const std::string& coordinator,
                                                    const OpenOptions& options);

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_CLUSTER_CLIENT_H_
