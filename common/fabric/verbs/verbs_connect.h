// The verbs backend's control path: connection setup through librdmacm, on
// both sides. An initiator resolves the target's address and route, creates
// its CQ and RC queue pair, and connects with the token in the request's
// private data; a listener binds, and accepts or rejects each request. The
// data path (verbs_fabric.cc: posting, polling, the send queue's
// accounting) starts from the CmConnection these hand over, as eRPC keeps a
// transport's session management apart from its datapath; the listener's
// event loop, which only hands requests here, and its probes stay there.
#ifndef RKV_COMMON_FABRIC_VERBS_VERBS_CONNECT_H_
#define RKV_COMMON_FABRIC_VERBS_VERBS_CONNECT_H_

#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/fabric/fabric.h"
#include "common/fabric/verbs/verbs_device.h"

namespace rkv::fabric {

// RC connect requests carry at most 56 bytes of private data on InfiniBand.
constexpr size_t kMaxVerbsToken = 56;

// Owns an rdma_cm event channel and one id on it, with the id's QP, CQ and
// completion channel.
struct CmConnection {
  rdma_event_channel* channel = nullptr;  // Null for ids accepted by a listener.
  rdma_cm_id* id = nullptr;
  ibv_comp_channel* comp_channel = nullptr;
  ibv_cq* cq = nullptr;  // Null for accepted ids: the listener's CQ serves them.
  bool has_qp = false;

  ~CmConnection();
};

// An initiator's established connection, and the inline size its queue pair
// was granted (which may be more than was asked).
struct CmConnected {
  std::unique_ptr<CmConnection> conn;
  uint32_t max_inline_data = 0;
};

// Connects an RC queue pair of `options`' size to `target`, the address
// `endpoint` names, presenting `endpoint.token`. Its CQ is attached to
// `shared_channel` (armed), or to a completion channel of its own if that
// is null. A target that cannot be reached is Unavailable, a refused token
// PermissionDenied, a route through another device FailedPrecondition.
absl::StatusOr<CmConnected> ConnectCm(const VerbsDevice& device, const sockaddr_in& target,
                                      const Endpoint& endpoint, const QueuePairOptions& options,
                                      ibv_comp_channel* shared_channel);

// Binds `local`, the address `address` names, on `device` and listens on
// it. An address of another device is FailedPrecondition naming it.
absl::StatusOr<std::unique_ptr<CmConnection>> ListenCm(const VerbsDevice& device,
                                                       const sockaddr_in& local,
                                                       const std::string& address);

// Answers a connect request (and acks its event): a request with `token`
// that arrived on `device` is accepted with a queue pair on `cq`; any other
// is rejected, a wrong token so that the initiator can tell it from a port
// where nobody listens. The error says why the request was not accepted.
absl::StatusOr<std::unique_ptr<CmConnection>> AcceptCm(const VerbsDevice& device,
                                                       rdma_cm_event* event,
                                                       absl::string_view token, ibv_cq* cq);

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_VERBS_VERBS_CONNECT_H_
