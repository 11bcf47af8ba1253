#include "common/fabric/verbs/verbs_connect.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/unaligned.h"

namespace rkv::fabric {
namespace {

// What a listener's rejections carry, so that the initiator can tell each
// from a port where nobody listens. kTokenRefused is as older builds sent
// and read it.
constexpr char kTokenRefused[] = "rkv: token refused";
constexpr char kPeerFenced[] = "rkv: peer fenced";
constexpr char kFormatRefused[] = "rkv: connect format refused";

constexpr uint32_t kConnectMagic = 0x43564B52;  // "RKVC"
constexpr uint8_t kConnectFormat = 1;
constexpr uint64_t kDigestSeeds[2] = {1, 2};

// Whether the rejection `event` carries begins with `reason`.
bool RejectedFor(const rdma_cm_event* event, absl::string_view reason) {
  const auto* data = static_cast<const char*>(event->param.conn.private_data);
  return event->event == RDMA_CM_EVENT_REJECTED && data != nullptr &&
         event->param.conn.private_data_len >= reason.size() &&
         std::memcmp(data, reason.data(), reason.size()) == 0;
}

// Local ACK timeout, as 4.096 us * 2^n: 2^16 is about 268 ms. With
// kRetryCount retries a peer that stopped answering is reported within about
// 2 s (kRetryExceeded) instead of the minutes rdma_cm's RoCE default allows.
// Not 7 retries: the InfiniBand spec makes only the RNR retry count of 7
// infinite, but rxe treats a transport retry count of 7 as infinite too, and
// a dead peer would then never be reported.
constexpr uint8_t kAckTimeout = 16;
constexpr int kRetryCount = 6;

// Failing to reach the target is Unavailable whatever errno says (no route
// is ENODEV, which would read as NotFound).
absl::Status Unreachable(const std::string& what, int err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", ErrnoText(err)));
}

void SetAckTimeout(rdma_cm_id* id) {
  uint8_t ack_timeout = kAckTimeout;
  rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
                  sizeof(ack_timeout));
}

// Waits for the next CM event on `channel` and checks it is `want`.
absl::Status ExpectEvent(rdma_event_channel* channel, rdma_cm_event_type want,
                         absl::Duration timeout, const std::string& what) {
  pollfd pfd{channel->fd, POLLIN, 0};
  const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  int rc;
  do {
    rc = ::poll(&pfd, 1, ms);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, ": timed out waiting for ", rdma_event_str(want)));
  }
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) return ErrnoToStatus(errno, what);
  const rdma_cm_event_type got = event->event;
  const int status = event->status;
  const bool token_refused = RejectedFor(event, kTokenRefused);
  const bool peer_fenced = RejectedFor(event, kPeerFenced);
  const bool format_refused = RejectedFor(event, kFormatRefused);
  rdma_ack_cm_event(event);
  if (got == want) return absl::OkStatus();
  if (token_refused) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, ": the target refused the connection token"));
  }
  if (peer_fenced) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the target fenced this peer id"));
  }
  if (format_refused) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the target refused the connect request's format (protocol version mismatch)"));
  }
  if (got == RDMA_CM_EVENT_REJECTED) {
    return absl::UnavailableError(
        absl::StrCat(what, ": rejected (status ", status, "): nobody listens there?"));
  }
  return absl::UnavailableError(
      absl::StrCat(what, ": ", rdma_event_str(got), " (status ", status, ")"));
}

// The queue pair asked for is one the device can give.
absl::Status CheckQueuePairOptions(const VerbsDevice& device, const QueuePairOptions& options,
                                   const std::string& what) {
  const uint32_t max_qp_wr = static_cast<uint32_t>(device.attr().max_qp_wr);
  if (options.max_send_wr == 0 || options.max_send_wr > max_qp_wr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": a queue pair of ", options.max_send_wr, " requests was asked for; device ",
        device.name(), " allows 1 to ", max_qp_wr));
  }
  if (device.rd_atomic_initiator() < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": device ", device.name(), " allows no outstanding READs or atomics"));
  }
  return absl::OkStatus();
}

// An event channel, polled without blocking, and a cm id on it.
absl::StatusOr<std::unique_ptr<CmConnection>> NewCmId(const std::string& what) {
  auto conn = std::make_unique<CmConnection>();
  conn->channel = rdma_create_event_channel();
  if (conn->channel == nullptr) return ErrnoToStatus(errno, what);
  SetNonBlocking(conn->channel->fd);
  if (rdma_create_id(conn->channel, &conn->id, nullptr, RDMA_PS_TCP) != 0) {
    return ErrnoToStatus(errno, what);
  }
  return conn;
}

// rdma_cm resolves the address, route, GID and path MTU for us. The route
// must leave through this fabric's device: a queue pair on another one
// could not use its protection domain. `source`: the address to leave from
// (nullptr: the route's).
absl::Status ResolveAddressAndRoute(const VerbsDevice& device, CmConnection& conn,
                                    const sockaddr_in& target, const sockaddr_in* source,
                                    absl::Duration timeout, const std::string& what) {
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  sockaddr_in sa = target;
  sockaddr_in src{};
  if (source != nullptr) {
    src = *source;
    src.sin_port = 0;
  }
  if (rdma_resolve_addr(conn.id, source != nullptr ? reinterpret_cast<sockaddr*>(&src) : nullptr,
                        reinterpret_cast<sockaddr*>(&sa), timeout_ms) != 0) {
    return Unreachable(what, errno);
  }
  RKV_RETURN_IF_ERROR(ExpectEvent(conn.channel, RDMA_CM_EVENT_ADDR_RESOLVED, timeout, what));
  if (conn.id->verbs != device.ctx()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the route leaves through device ", DeviceName(conn.id), ", not ",
                     device.name(), "; pass --rdma_device=", DeviceName(conn.id)));
  }
  SetAckTimeout(conn.id);
  if (rdma_resolve_route(conn.id, timeout_ms) != 0) return Unreachable(what, errno);
  return ExpectEvent(conn.channel, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout, what);
}

// Creates the CQ, on `shared_channel` or a completion channel of its own,
// and the RC queue pair. Returns the inline size the device granted.
absl::StatusOr<uint32_t> CreateQueuePair(const VerbsDevice& device, CmConnection& conn,
                                         const QueuePairOptions& options,
                                         ibv_comp_channel* shared_channel,
                                         const std::string& what) {
  ibv_comp_channel* comp_channel = shared_channel;
  if (comp_channel == nullptr) {
    conn.comp_channel = comp_channel = ibv_create_comp_channel(device.ctx());
    if (comp_channel == nullptr) {
      return ErrnoToStatus(errno, absl::StrCat(what, ": ibv_create_comp_channel"));
    }
    SetNonBlocking(comp_channel->fd);
  }
  conn.cq =
      ibv_create_cq(device.ctx(), static_cast<int>(options.max_send_wr), nullptr, comp_channel, 0);
  if (conn.cq == nullptr) return ErrnoToStatus(errno, absl::StrCat(what, ": ibv_create_cq"));
  // A shared channel keeps its CQs armed from the start (VerbsCompletionChannel).
  if (shared_channel != nullptr) ibv_req_notify_cq(conn.cq, 0);
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = conn.cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 0;  // Selective signaling: only kSignaled requests complete.
  attr.cap.max_send_wr = options.max_send_wr;
  attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = options.max_inline_data;
  if (rdma_create_qp(conn.id, device.pd(), &attr) != 0) {
    return ErrnoToStatus(
        errno, absl::StrCat(what, ": rdma_create_qp with ", options.max_send_wr, " requests and ",
                            options.max_inline_data, " bytes inline"));
  }
  conn.has_qp = true;
  // rdma_create_qp wrote back what the device granted.
  return attr.cap.max_inline_data;
}

// Sends the connect request with the peer id and the token's digest as its
// private data and waits for the connection to be established (or refused).
absl::Status Handshake(const VerbsDevice& device, CmConnection& conn, uint64_t peer_id,
                       const std::string& token, absl::Duration timeout, const std::string& what) {
  const std::string data = EncodeConnectData(peer_id, token);
  rdma_conn_param param{};
  param.private_data = data.data();
  param.private_data_len = static_cast<uint8_t>(data.size());
  param.initiator_depth = static_cast<uint8_t>(device.rd_atomic_initiator());
  param.responder_resources = static_cast<uint8_t>(device.rd_atomic_responder());
  param.retry_count = kRetryCount;
  param.rnr_retry_count = 7;
  if (rdma_connect(conn.id, &param) != 0) return Unreachable(what, errno);
  return ExpectEvent(conn.channel, RDMA_CM_EVENT_ESTABLISHED, timeout, what);
}

}  // namespace

std::string EncodeConnectData(uint64_t peer_id, absl::string_view token) {
  std::string out(kConnectDataBytes, '\0');
  Put<uint32_t>(out.data(), 0, kConnectMagic);
  Put<uint8_t>(out.data(), 4, kConnectFormat);
  Put<uint64_t>(out.data(), 8, peer_id);
  Put<uint64_t>(out.data(), 16, XXH64(token, kDigestSeeds[0]));
  Put<uint64_t>(out.data(), 24, XXH64(token, kDigestSeeds[1]));
  return out;
}

absl::StatusOr<uint64_t> CheckConnectData(absl::string_view data, absl::string_view token) {
  // The transport may pad private data with zeros.
  if (data.size() < kConnectDataBytes || Get<uint32_t>(data, 0) != kConnectMagic ||
      Get<uint8_t>(data, 4) != kConnectFormat ||
      !std::all_of(data.begin() + 5, data.begin() + 8, [](char c) { return c == 0; }) ||
      !std::all_of(data.begin() + kConnectDataBytes, data.end(), [](char c) { return c == 0; })) {
    return absl::InvalidArgumentError(
        "not a connect request of this format (an older rkv build's, or not rkv's)");
  }
  if (!token.empty()) {
    const std::string want = EncodeConnectData(0, token);
    // Constant time: how far a guess matched must not show.
    unsigned char diff = 0;
    for (size_t i = 16; i < kConnectDataBytes; ++i) {
      diff |= static_cast<unsigned char>(data[i] ^ want[i]);
    }
    if (diff != 0) return absl::PermissionDeniedError("wrong connection token");
  }
  return Get<uint64_t>(data, 8);
}

CmConnection::~CmConnection() {
  if (id != nullptr) {
    if (has_qp) {
      rdma_disconnect(id);
      rdma_destroy_qp(id);
    }
    rdma_destroy_id(id);
  }
  if (cq != nullptr) ibv_destroy_cq(cq);
  if (comp_channel != nullptr) ibv_destroy_comp_channel(comp_channel);
  if (channel != nullptr) rdma_destroy_event_channel(channel);
}

absl::StatusOr<CmConnected> ConnectCm(const VerbsDevice& device, const sockaddr_in& target,
                                      const Endpoint& endpoint, const QueuePairOptions& options,
                                      ibv_comp_channel* shared_channel) {
  const std::string what = absl::StrCat("verbs connect to ", endpoint.address);
  RKV_RETURN_IF_ERROR(CheckQueuePairOptions(device, options, what));
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<CmConnection> conn, NewCmId(what));
  absl::Status resolved =
      ResolveAddressAndRoute(device, *conn, target, nullptr, options.connect_timeout, what);
  if (absl::IsFailedPrecondition(resolved)) {
    // The target may be an address of this very device (a server reaching
    // its own region): left from that address, the route stays on it.
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<CmConnection> local, NewCmId(what));
    if (ResolveAddressAndRoute(device, *local, target, &target, options.connect_timeout, what)
            .ok()) {
      conn = std::move(local);
      resolved = absl::OkStatus();
    }
  }
  RKV_RETURN_IF_ERROR(resolved);
  RKV_ASSIGN_OR_RETURN(const uint32_t max_inline_data,
                       CreateQueuePair(device, *conn, options, shared_channel, what));
  RKV_RETURN_IF_ERROR(
      Handshake(device, *conn, options.peer_id, endpoint.token, options.connect_timeout, what));
  return CmConnected{std::move(conn), max_inline_data};
}

absl::StatusOr<std::unique_ptr<CmConnection>> ListenCm(const VerbsDevice& device,
                                                       const sockaddr_in& local,
                                                       const std::string& address) {
  sockaddr_in sa = local;
  auto conn = std::make_unique<CmConnection>();
  const std::string what = absl::StrCat("verbs listen on ", address);
  conn->channel = rdma_create_event_channel();
  if (conn->channel == nullptr) return ErrnoToStatus(errno, what);
  if (rdma_create_id(conn->channel, &conn->id, nullptr, RDMA_PS_TCP) != 0) {
    return ErrnoToStatus(errno, what);
  }
  if (rdma_bind_addr(conn->id, reinterpret_cast<sockaddr*>(&sa)) != 0) {
    const int err = errno;
    if (err == ENODEV || err == EADDRNOTAVAIL) {
      return absl::FailedPreconditionError(
          absl::StrCat(what,
                       ": no RDMA device has this address (`rdma link show` lists the "
                       "interfaces that have one)"));
    }
    return ErrnoToStatus(err, what);
  }
  // A specific address belongs to one device; a wildcard binds none yet.
  if (conn->id->verbs != nullptr && conn->id->verbs != device.ctx()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the address is on device ", DeviceName(conn->id), ", not ",
                     device.name(), "; pass --rdma_device=", DeviceName(conn->id)));
  }
  if (rdma_listen(conn->id, 1024) != 0) return ErrnoToStatus(errno, what);
  // Drained without blocking once poll says it is ready: an event poll saw
  // may be gone by the time it is read (its id destroyed by a Fence).
  SetNonBlocking(conn->channel->fd);
  return conn;
}

absl::StatusOr<CmAccepted> AcceptCm(const VerbsDevice& device, rdma_cm_event* event,
                                    absl::string_view token,
                                    absl::FunctionRef<bool(uint64_t)> fenced, ibv_cq* cq) {
  rdma_cm_id* id = event->id;
  const uint8_t initiator_depth = event->param.conn.initiator_depth;
  // The private data goes with the event: read it before the ack.
  const absl::StatusOr<uint64_t> peer_id = CheckConnectData(
      absl::string_view(
          static_cast<const char*>(event->param.conn.private_data),
          event->param.conn.private_data != nullptr ? event->param.conn.private_data_len : 0),
      token);
  rdma_ack_cm_event(event);
  absl::Status refused;
  const char* reason = nullptr;  // What the rejection carries.
  if (!peer_id.ok()) {
    const bool wrong_token = absl::IsPermissionDenied(peer_id.status());
    refused = absl::Status(peer_id.status().code(),
                           absl::StrCat("rejected a connection: ", peer_id.status().message()));
    reason = wrong_token ? kTokenRefused : kFormatRefused;
  } else if (*peer_id != 0 && fenced(*peer_id)) {
    refused = absl::FailedPreconditionError(
        absl::StrCat("rejected a connection from fenced peer ", *peer_id));
    reason = kPeerFenced;
  } else if (id->verbs != device.ctx()) {
    refused = absl::FailedPreconditionError(absl::StrCat(
        "rejected a connection: arrived on device ", DeviceName(id), ", not ", device.name()));
  }
  if (!refused.ok()) {
    rdma_reject(id, reason, reason != nullptr ? static_cast<uint8_t>(std::strlen(reason)) : 0);
    rdma_destroy_id(id);
    return refused;
  }
  auto conn = std::make_unique<CmConnection>();
  conn->id = id;
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap = {2, 1, 1, 1, 0};  // Room for a probe.
  if (rdma_create_qp(id, device.pd(), &attr) != 0) {
    const int err = errno;
    rdma_reject(id, nullptr, 0);
    return absl::InternalError(absl::StrCat("cannot create a QP: ", ErrnoText(err)));
  }
  conn->has_qp = true;
  SetAckTimeout(id);
  rdma_conn_param param{};
  param.responder_resources =
      static_cast<uint8_t>(std::min<int>(initiator_depth, device.rd_atomic_responder()));
  param.initiator_depth = 0;
  param.retry_count = kRetryCount;
  param.rnr_retry_count = 7;
  if (rdma_accept(id, &param) != 0) {
    return absl::UnavailableError(absl::StrCat("rdma_accept: ", ErrnoText(errno)));
  }
  return CmAccepted{std::move(conn), *peer_id};
}

}  // namespace rkv::fabric
