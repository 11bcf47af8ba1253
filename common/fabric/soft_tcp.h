// The soft fabric over TCP: a queue pair is one connection; the target side
// is a virtual NIC whose threads execute requests against registered memory
// without involving the application.
#ifndef RKV_COMMON_FABRIC_SOFT_TCP_H_
#define RKV_COMMON_FABRIC_SOFT_TCP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/fabric/fabric.h"
#include "common/fabric/memory_table.h"

namespace rkv::fabric {

absl::StatusOr<std::unique_ptr<Listener>> ListenSoftTcp(std::shared_ptr<const MemoryTable> table,
                                                        const ListenOptions& options);

// A completion channel for queue pairs of ConnectSoftTcp: an epoll set of
// their sockets, so that a wait ends when responses arrive on any of them.
absl::StatusOr<std::shared_ptr<CompletionChannel>> NewSoftTcpCompletionChannel();

absl::StatusOr<std::unique_ptr<QueuePair>> ConnectSoftTcp(
    std::shared_ptr<const MemoryTable> local, const Endpoint& endpoint,
    const QueuePairOptions& options);

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SOFT_TCP_H_
