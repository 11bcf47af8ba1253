// The soft fabric over TCP: a queue pair is one connection; the target side
// is a virtual NIC whose threads execute requests against registered memory
// without involving the application.
#ifndef RKV_COMMON_FABRIC_SOFT_SOFT_TCP_H_
#define RKV_COMMON_FABRIC_SOFT_SOFT_TCP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/fabric/fabric.h"
#include "common/fabric/memory_table.h"

namespace rkv::fabric {

// `busy_poll` (FabricOptions::soft_busy_poll): how long the target's event
// loops and the initiator's waits spin before they sleep.
absl::StatusOr<std::unique_ptr<Listener>> ListenSoftTcp(std::shared_ptr<const MemoryTable> table,
                                                        const ListenOptions& options,
                                                        absl::Duration busy_poll);

// A completion channel for queue pairs of ConnectSoftTcp: an epoll set of
// their sockets, so that a wait ends when responses arrive on any of them.
absl::StatusOr<std::shared_ptr<CompletionChannel>> NewSoftTcpCompletionChannel(
    absl::Duration busy_poll);

absl::StatusOr<std::unique_ptr<QueuePair>> ConnectSoftTcp(std::shared_ptr<const MemoryTable> local,
                                                          const Endpoint& endpoint,
                                                          const QueuePairOptions& options,
                                                          absl::Duration busy_poll);

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SOFT_SOFT_TCP_H_
