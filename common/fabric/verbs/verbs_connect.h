// The verbs backend's control path: connection setup through librdmacm, on
// both sides. An initiator resolves the target's address and route, creates
// its CQ and RC queue pair, and connects with its peer id and the token's
// digest in the request's private data; a listener binds, and accepts or
// rejects each request. The data path (verbs_fabric.cc: posting, polling,
// the send queue's accounting) starts from the CmConnection these hand
// over, as eRPC keeps a transport's session management apart from its
// datapath; the listener's event loop, which only hands requests here, its
// probes and its fences stay there.
#ifndef RKV_COMMON_FABRIC_VERBS_VERBS_CONNECT_H_
#define RKV_COMMON_FABRIC_VERBS_VERBS_CONNECT_H_

#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/fabric/fabric.h"
#include "common/fabric/verbs/verbs_device.h"

namespace rkv::fabric {

// The longest connection token, as ClusterTokenFromFlags allows. (It once
// travelled whole in the connect request's 56 bytes of private data; the
// request now carries a digest of it, below.)
constexpr size_t kMaxVerbsToken = 56;

// A connect request's private data (RDMA_PS_TCP: at most 56 bytes), all
// integers little-endian:
//
//   0  magic "RKVC"       4  format (1)      5  zero (3 bytes)
//   8  peer id (QueuePairOptions::peer_id)
//  16  token digest: XXH64(token, seed 1), then XXH64(token, seed 2)
//
// A digest rather than the token: tokens of up to 56 bytes would leave no
// room for the peer id. It is no weaker than the token was, which travelled
// in clear: either is a credential that whoever reads the request can
// replay; but XXH64 is not a cryptographic hash, so a short or guessable
// token can be found from its digest by search, as it could be read from
// the old request. Before the format had a magic, the private data was the
// bare token; a target refuses such a request (kFormatRefused).
inline constexpr size_t kConnectDataBytes = 32;
std::string EncodeConnectData(uint64_t peer_id, absl::string_view token);
// Checks a connect request's private data (zero padding after it allowed)
// against the listener's `token` (empty accepts any) and returns the peer
// id it names: InvalidArgument for another format, PermissionDenied for a
// wrong token.
absl::StatusOr<uint64_t> CheckConnectData(absl::string_view data, absl::string_view token);

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
// `endpoint` names, presenting `endpoint.token` and `options.peer_id`. Its
// CQ is attached to `shared_channel` (armed), or to a completion channel of
// its own if that is null. A target that cannot be reached is Unavailable,
// a refused token PermissionDenied; a route through another device, a
// fenced peer id or a target of another connect format FailedPrecondition.
absl::StatusOr<CmConnected> ConnectCm(const VerbsDevice& device, const sockaddr_in& target,
                                      const Endpoint& endpoint, const QueuePairOptions& options,
                                      ibv_comp_channel* shared_channel);

// Binds `local`, the address `address` names, on `device` and listens on
// it. An address of another device is FailedPrecondition naming it.
absl::StatusOr<std::unique_ptr<CmConnection>> ListenCm(const VerbsDevice& device,
                                                       const sockaddr_in& local,
                                                       const std::string& address);

// An accepted connection and the peer id its request named.
struct CmAccepted {
  std::unique_ptr<CmConnection> conn;
  uint64_t peer_id = 0;
};

// Answers a connect request (and acks its event): a request of this format
// with `token`, from a peer id that `fenced` does not name, that arrived on
// `device`, is accepted with a queue pair on `cq`; any other is rejected,
// a wrong token, a fenced peer or another format with a reason of its own
// so that the initiator can tell each from a port where nobody listens.
// The error says why the request was not accepted.
absl::StatusOr<CmAccepted> AcceptCm(const VerbsDevice& device, rdma_cm_event* event,
                                    absl::string_view token,
                                    absl::FunctionRef<bool(uint64_t)> fenced, ibv_cq* cq);

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_VERBS_VERBS_CONNECT_H_
