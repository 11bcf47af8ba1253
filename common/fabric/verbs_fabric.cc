#include "common/fabric/verbs_fabric.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include <mutex>
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/socket.h"
#include "common/status.h"

namespace rkv::fabric {
namespace {

// RC connect requests carry at most 56 bytes of private data on InfiniBand.
constexpr size_t kMaxVerbsToken = 56;
// Outstanding READs/atomics asked for; capped by what the device supports.
constexpr int kWantRdAtomic = 16;

std::string ErrnoText(int err) { return std::strerror(err); }

// The device and protection domain every region and queue pair of one
// Fabric shares; kept alive by each of them.
class VerbsDevice {
 public:
  VerbsDevice(ibv_context* ctx, ibv_pd* pd, const ibv_device_attr& attr, std::string name)
      : ctx_(ctx), pd_(pd), attr_(attr), name_(std::move(name)) {}
  ~VerbsDevice() {
    ibv_dealloc_pd(pd_);
    ibv_close_device(ctx_);
  }
  ibv_context* ctx() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const ibv_device_attr& attr() const { return attr_; }
  const std::string& name() const { return name_; }
  int rd_atomic_initiator() const { return std::min(kWantRdAtomic, attr_.max_qp_init_rd_atom); }
  int rd_atomic_responder() const { return std::min(kWantRdAtomic, attr_.max_qp_rd_atom); }

 private:
  ibv_context* const ctx_;
  ibv_pd* const pd_;
  const ibv_device_attr attr_;
  const std::string name_;
};

// Owns an rdma_cm event channel and one id on it, with the id's QP and CQ.
struct CmConnection {
  rdma_event_channel* channel = nullptr;  // Null for ids accepted by a listener.
  rdma_cm_id* id = nullptr;
  ibv_cq* cq = nullptr;
  bool has_qp = false;

  ~CmConnection() {
    if (id != nullptr) {
      if (has_qp) {
        rdma_disconnect(id);
        rdma_destroy_qp(id);
      }
      rdma_destroy_id(id);
    }
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (channel != nullptr) rdma_destroy_event_channel(channel);
  }
};

absl::StatusOr<sockaddr_in> ToSockaddr(absl::string_view address) {
  RKV_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(address));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(hp.port);
  inet_pton(AF_INET, hp.host == "localhost" ? "127.0.0.1" : hp.host.c_str(), &sa.sin_addr);
  return sa;
}

// Waits for the next CM event on `channel` and checks it is `want`.
absl::Status ExpectEvent(rdma_event_channel* channel, rdma_cm_event_type want,
                         absl::Duration timeout, const std::string& what,
                         std::string* private_data = nullptr) {
  pollfd pfd{channel->fd, POLLIN, 0};
  const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  int rc;
  do {
    rc = ::poll(&pfd, 1, ms);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) return ErrnoToStatus(errno, what);
  const rdma_cm_event_type got = event->event;
  const int status = event->status;
  if (private_data != nullptr && event->param.conn.private_data != nullptr) {
    private_data->assign(static_cast<const char*>(event->param.conn.private_data),
                         event->param.conn.private_data_len);
  }
  rdma_ack_cm_event(event);
  if (got == want) return absl::OkStatus();
  if (got == RDMA_CM_EVENT_REJECTED) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, ": rejected by the target (wrong connection token?)"));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", rdma_event_str(got), " (status ",
                                             status, ")"));
}

CompletionStatus MapStatus(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return CompletionStatus::kSuccess;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_QP_OP_ERR: return CompletionStatus::kLocalProtectionError;
    case IBV_WC_REM_ACCESS_ERR: return CompletionStatus::kRemoteAccessError;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR: return CompletionStatus::kRemoteInvalidRequest;
    case IBV_WC_WR_FLUSH_ERR: return CompletionStatus::kFlushed;
    default: return CompletionStatus::kRetryExceeded;
  }
}

Opcode MapOpcode(ibv_wc_opcode op) {
  switch (op) {
    case IBV_WC_RDMA_WRITE: return Opcode::kWrite;
    case IBV_WC_COMP_SWAP: return Opcode::kCas64;
    case IBV_WC_FETCH_ADD: return Opcode::kFaa64;
    default: return Opcode::kRead;
  }
}

class VerbsMemoryRegion final : public MemoryRegion {
 public:
  VerbsMemoryRegion(std::shared_ptr<VerbsDevice> device, ibv_mr* mr, uint32_t access)
      : MemoryRegion(mr->addr, mr->length, mr->lkey, mr->rkey, access),
        device_(std::move(device)),
        mr_(mr) {}
  ~VerbsMemoryRegion() override { ibv_dereg_mr(mr_); }

 private:
  const std::shared_ptr<VerbsDevice> device_;
  ibv_mr* const mr_;
};

class VerbsQueuePair final : public QueuePair {
 public:
  VerbsQueuePair(std::shared_ptr<VerbsDevice> device, std::unique_ptr<CmConnection> conn,
                 QueuePairLimits limits)
      : device_(std::move(device)), conn_(std::move(conn)), limits_(limits) {}

  absl::Status Post(absl::Span<const WorkRequest> batch) override {
    if (batch.empty()) return absl::OkStatus();
    std::vector<ibv_send_wr> wrs(batch.size());
    std::vector<ibv_sge> sges(batch.size());
    uint64_t bytes = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const WorkRequest& w = batch[i];
      const bool atomic = w.opcode == Opcode::kCas64 || w.opcode == Opcode::kFaa64;
      if (atomic && w.length != 8) {
        return absl::InvalidArgumentError(
            absl::StrCat("work request ", w.wr_id, ": atomics move exactly 8 bytes"));
      }
      if (w.length > kMaxMessageBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("work request ", w.wr_id, ": length ", w.length, " too large"));
      }
      if ((w.flags & kInline) && (w.opcode != Opcode::kWrite || w.length > limits_.max_inline_data)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "work request ", w.wr_id, ": inline needs a WRITE of at most ",
            limits_.max_inline_data, " bytes"));
      }
      sges[i] = {reinterpret_cast<uintptr_t>(w.local), w.length, w.lkey};
      ibv_send_wr& wr = wrs[i];
      wr.wr_id = w.wr_id;
      wr.next = i + 1 < batch.size() ? &wrs[i + 1] : nullptr;
      wr.sg_list = w.length > 0 ? &sges[i] : nullptr;
      wr.num_sge = w.length > 0 ? 1 : 0;
      wr.send_flags = (w.flags & kSignaled ? IBV_SEND_SIGNALED : 0) |
                      (w.flags & kFenced ? IBV_SEND_FENCE : 0) |
                      (w.flags & kInline ? IBV_SEND_INLINE : 0);
      switch (w.opcode) {
        case Opcode::kRead:
        case Opcode::kWrite:
          wr.opcode = w.opcode == Opcode::kRead ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
          wr.wr.rdma.remote_addr = w.remote_addr;
          wr.wr.rdma.rkey = w.rkey;
          bytes += w.length;
          break;
        case Opcode::kCas64:
        case Opcode::kFaa64:
          wr.opcode = w.opcode == Opcode::kCas64 ? IBV_WR_ATOMIC_CMP_AND_SWP
                                                 : IBV_WR_ATOMIC_FETCH_AND_ADD;
          wr.wr.atomic.remote_addr = w.remote_addr;
          wr.wr.atomic.rkey = w.rkey;
          wr.wr.atomic.compare_add = w.compare_add;
          wr.wr.atomic.swap = w.swap;
          bytes += 8;
          break;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(conn_->id->qp, wrs.data(), &bad);
    if (rc != 0) {
      if (rc == ENOMEM) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "send queue full (max_send_wr ", limits_.max_send_wr,
            "); signal a request now and then and poll its completion"));
      }
      return ErrnoToStatus(rc, "ibv_post_send");
    }
    counters_.doorbells++;
    counters_.requests += batch.size();
    counters_.bytes += bytes;
    return absl::OkStatus();
  }

  size_t Poll(absl::Span<Completion> out) override {
    if (out.empty()) return 0;
    std::vector<ibv_wc> wc(out.size());
    std::lock_guard<std::mutex> lock(mu_);
    const int n = ibv_poll_cq(conn_->cq, static_cast<int>(wc.size()), wc.data());
    for (int i = 0; i < n; ++i) {
      out[i] = {wc[i].wr_id, MapOpcode(wc[i].opcode), MapStatus(wc[i].status), wc[i].byte_len};
      if (wc[i].status != IBV_WC_SUCCESS) {
        error_ = true;
        counters_.error_completions++;
      }
    }
    return n > 0 ? static_cast<size_t>(n) : 0;
  }

  size_t Wait(absl::Span<Completion> out, absl::Duration timeout) override {
    // RDMA completions arrive in microseconds: spin, as verbs clients do.
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      if (size_t n = Poll(out); n > 0) return n;
      if (absl::Now() >= deadline) return 0;
    }
  }

  bool in_error() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  QueuePairCounters counters() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
  }
  QueuePairLimits limits() const override { return limits_; }

 private:
  const std::shared_ptr<VerbsDevice> device_;
  const std::unique_ptr<CmConnection> conn_;
  const QueuePairLimits limits_;
  mutable std::mutex mu_;
  bool error_ ABSL_GUARDED_BY(mu_) = false;
  QueuePairCounters counters_ ABSL_GUARDED_BY(mu_);
};

class VerbsListener final : public Listener {
 public:
  VerbsListener(std::shared_ptr<VerbsDevice> device, std::unique_ptr<CmConnection> listen,
                std::string address, std::string token)
      : device_(std::move(device)),
        listen_(std::move(listen)),
        address_(std::move(address)),
        token_(std::move(token)) {
    thread_ = std::thread([this] { EventLoop(); });
  }
  ~VerbsListener() override {
    stopping_.store(true);
    thread_.join();
    accepted_.clear();  // Disconnects and destroys each accepted QP.
  }
  Endpoint endpoint() const override { return {address_, token_}; }

 private:
  void EventLoop() {
    while (!stopping_.load()) {
      pollfd pfd{listen_->channel->fd, POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) continue;
      rdma_cm_event* event = nullptr;
      if (rdma_get_cm_event(listen_->channel, &event) != 0) continue;
      if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        OnConnectRequest(event);  // Acks the event.
        continue;
      }
      if (event->event == RDMA_CM_EVENT_DISCONNECTED) {
        rdma_cm_id* id = event->id;
        rdma_ack_cm_event(event);
        accepted_.remove_if([id](const auto& c) { return c->id == id; });
        continue;
      }
      rdma_ack_cm_event(event);
    }
  }

  bool TokenMatches(const rdma_cm_event* event) const {
    if (token_.empty()) return true;
    const auto* data = static_cast<const char*>(event->param.conn.private_data);
    const size_t len = event->param.conn.private_data_len;
    // The transport may pad private data with zeros.
    if (data == nullptr || len < token_.size()) return false;
    if (std::memcmp(data, token_.data(), token_.size()) != 0) return false;
    return std::all_of(data + token_.size(), data + len, [](char c) { return c == 0; });
  }

  void OnConnectRequest(rdma_cm_event* event) {
    rdma_cm_id* id = event->id;
    const uint8_t initiator_depth = event->param.conn.initiator_depth;
    const bool token_ok = TokenMatches(event);
    rdma_ack_cm_event(event);
    if (!token_ok || id->verbs != device_->ctx()) {
      RKV_LOG(WARNING) << "verbs fabric " << address_ << ": rejected a connection: "
                       << (token_ok ? "arrived on another device" : "wrong connection token");
      rdma_reject(id, nullptr, 0);
      rdma_destroy_id(id);
      return;
    }
    auto conn = std::make_unique<CmConnection>();
    conn->id = id;
    // The target posts nothing: a tiny CQ and send queue suffice.
    conn->cq = ibv_create_cq(device_->ctx(), 4, nullptr, nullptr, 0);
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = conn->cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap = {1, 1, 1, 1, 0};
    if (conn->cq == nullptr || rdma_create_qp(id, device_->pd(), &attr) != 0) {
      RKV_LOG(WARNING) << "verbs fabric " << address_ << ": cannot create a QP: "
                       << ErrnoText(errno);
      rdma_reject(id, nullptr, 0);
      return;
    }
    conn->has_qp = true;
    rdma_conn_param param{};
    param.responder_resources =
        static_cast<uint8_t>(std::min<int>(initiator_depth, device_->rd_atomic_responder()));
    param.initiator_depth = 0;
    param.rnr_retry_count = 7;
    if (rdma_accept(id, &param) != 0) {
      RKV_LOG(WARNING) << "verbs fabric " << address_ << ": rdma_accept: " << ErrnoText(errno);
      return;
    }
    accepted_.push_back(std::move(conn));
  }

  const std::shared_ptr<VerbsDevice> device_;
  const std::unique_ptr<CmConnection> listen_;
  const std::string address_;
  const std::string token_;
  std::atomic<bool> stopping_{false};
  std::list<std::unique_ptr<CmConnection>> accepted_;  // Touched by the event thread only.
  std::thread thread_;
};

class VerbsFabric final : public Fabric {
 public:
  explicit VerbsFabric(std::shared_ptr<VerbsDevice> device) : device_(std::move(device)) {}

  FabricKind kind() const override { return FabricKind::kVerbs; }

  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                               uint32_t access) override {
    int flags = 0;
    if (access & kLocalWrite) flags |= IBV_ACCESS_LOCAL_WRITE;
    if (access & kRemoteRead) flags |= IBV_ACCESS_REMOTE_READ;
    if (access & kRemoteWrite) flags |= IBV_ACCESS_REMOTE_WRITE;
    if (access & kRemoteAtomic) flags |= IBV_ACCESS_REMOTE_ATOMIC;
    ibv_mr* mr = ibv_reg_mr(device_->pd(), addr, length, flags);
    if (mr == nullptr) {
      const int err = errno;
      if (err == ENOMEM || err == EPERM || err == EAGAIN) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "ibv_reg_mr of ", length, " bytes on ", device_->name(), ": ", ErrnoText(err),
            ". Pinned memory is limited by RLIMIT_MEMLOCK: raise it with `ulimit -l "
            "unlimited` (LimitMEMLOCK=infinity under systemd, IPC_LOCK in containers)"));
      }
      return ErrnoToStatus(err, absl::StrCat("ibv_reg_mr on ", device_->name()));
    }
    return std::unique_ptr<MemoryRegion>(
        std::make_unique<VerbsMemoryRegion>(device_, mr, access));
  }

  absl::StatusOr<std::unique_ptr<Listener>> Listen(const ListenOptions& options) override {
    if (options.token.size() > kMaxVerbsToken) {
      return absl::InvalidArgumentError(
          absl::StrCat("verbs connection tokens are at most ", kMaxVerbsToken, " bytes"));
    }
    RKV_ASSIGN_OR_RETURN(sockaddr_in sa, ToSockaddr(options.address));
    auto conn = std::make_unique<CmConnection>();
    const std::string what = absl::StrCat("verbs listen on ", options.address);
    conn->channel = rdma_create_event_channel();
    if (conn->channel == nullptr) return ErrnoToStatus(errno, what);
    if (rdma_create_id(conn->channel, &conn->id, nullptr, RDMA_PS_TCP) != 0) {
      return ErrnoToStatus(errno, what);
    }
    if (rdma_bind_addr(conn->id, reinterpret_cast<sockaddr*>(&sa)) != 0 ||
        rdma_listen(conn->id, 128) != 0) {
      return ErrnoToStatus(errno, what);
    }
    const std::string host = options.address.substr(0, options.address.rfind(':'));
    std::string address = absl::StrCat(host, ":", ntohs(rdma_get_src_port(conn->id)));
    return std::unique_ptr<Listener>(std::make_unique<VerbsListener>(
        device_, std::move(conn), std::move(address), options.token));
  }

  absl::StatusOr<std::unique_ptr<QueuePair>> Connect(const Endpoint& endpoint,
                                                     const QueuePairOptions& options) override {
    if (endpoint.token.size() > kMaxVerbsToken) {
      return absl::InvalidArgumentError(
          absl::StrCat("verbs connection tokens are at most ", kMaxVerbsToken, " bytes"));
    }
    RKV_ASSIGN_OR_RETURN(sockaddr_in sa, ToSockaddr(endpoint.address));
    const std::string what = absl::StrCat("verbs connect to ", endpoint.address);
    const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(options.connect_timeout));
    auto conn = std::make_unique<CmConnection>();
    conn->channel = rdma_create_event_channel();
    if (conn->channel == nullptr) return ErrnoToStatus(errno, what);
    ::fcntl(conn->channel->fd, F_SETFL, ::fcntl(conn->channel->fd, F_GETFL) | O_NONBLOCK);
    if (rdma_create_id(conn->channel, &conn->id, nullptr, RDMA_PS_TCP) != 0) {
      return ErrnoToStatus(errno, what);
    }
    // rdma_cm resolves the address, route, GID and path MTU for us.
    if (rdma_resolve_addr(conn->id, nullptr, reinterpret_cast<sockaddr*>(&sa), timeout_ms) != 0) {
      return ErrnoToStatus(errno, what);
    }
    RKV_RETURN_IF_ERROR(ExpectEvent(conn->channel, RDMA_CM_EVENT_ADDR_RESOLVED,
                                    options.connect_timeout, what));
    if (conn->id->verbs != device_->ctx()) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": the route leaves through device ",
          ibv_get_device_name(conn->id->verbs->device), ", not ", device_->name(),
          "; pass --rdma_device=", ibv_get_device_name(conn->id->verbs->device)));
    }
    if (rdma_resolve_route(conn->id, timeout_ms) != 0) return ErrnoToStatus(errno, what);
    RKV_RETURN_IF_ERROR(ExpectEvent(conn->channel, RDMA_CM_EVENT_ROUTE_RESOLVED,
                                    options.connect_timeout, what));

    const int max_wr = std::min<int>(static_cast<int>(options.max_send_wr),
                                     device_->attr().max_qp_wr);
    conn->cq = ibv_create_cq(device_->ctx(), max_wr, nullptr, nullptr, 0);
    if (conn->cq == nullptr) return ErrnoToStatus(errno, absl::StrCat(what, ": ibv_create_cq"));
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = conn->cq;
    attr.qp_type = IBV_QPT_RC;
    attr.sq_sig_all = 0;  // Selective signaling: only kSignaled requests complete.
    attr.cap.max_send_wr = static_cast<uint32_t>(max_wr);
    attr.cap.max_recv_wr = 1;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = options.max_inline_data;
    if (rdma_create_qp(conn->id, device_->pd(), &attr) != 0) {
      return ErrnoToStatus(errno, absl::StrCat(what, ": rdma_create_qp"));
    }
    conn->has_qp = true;

    rdma_conn_param param{};
    param.private_data = endpoint.token.data();
    param.private_data_len = static_cast<uint8_t>(endpoint.token.size());
    param.initiator_depth = static_cast<uint8_t>(device_->rd_atomic_initiator());
    param.responder_resources = static_cast<uint8_t>(device_->rd_atomic_responder());
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    if (rdma_connect(conn->id, &param) != 0) return ErrnoToStatus(errno, what);
    RKV_RETURN_IF_ERROR(ExpectEvent(conn->channel, RDMA_CM_EVENT_ESTABLISHED,
                                    options.connect_timeout, what));
    QueuePairLimits limits{attr.cap.max_send_wr, attr.cap.max_inline_data,
                           static_cast<uint32_t>(device_->rd_atomic_initiator())};
    return std::unique_ptr<QueuePair>(
        std::make_unique<VerbsQueuePair>(device_, std::move(conn), limits));
  }

 private:
  const std::shared_ptr<VerbsDevice> device_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Fabric>> OpenVerbsFabric(const FabricOptions& options) {
  int num = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&num);
  if (list == nullptr || num == 0) {
    const int err = errno;
    if (list != nullptr) ibv_free_device_list(list);
    return absl::FailedPreconditionError(absl::StrCat(
        "no RDMA device found (ibv_get_device_list: ",
        err != 0 ? ErrnoText(err) : std::string("no devices"),
        "). The verbs fabric needs RDMA hardware or a kernel with RDMA support; run with "
        "--fabric=soft to use the software fabric over TCP instead"));
  }
  ibv_device* chosen = nullptr;
  std::string names;
  for (int i = 0; i < num; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    absl::StrAppend(&names, i ? ", " : "", name);
    if (chosen == nullptr && (options.rdma_device.empty() || options.rdma_device == name)) {
      chosen = list[i];
    }
  }
  if (chosen == nullptr) {
    ibv_free_device_list(list);
    return absl::NotFoundError(absl::StrCat("RDMA device '", options.rdma_device,
                                            "' not found; this host has: ", names));
  }
  const std::string name = ibv_get_device_name(chosen);
  ibv_context* ctx = ibv_open_device(chosen);
  ibv_free_device_list(list);
  if (ctx == nullptr) return ErrnoToStatus(errno, absl::StrCat("ibv_open_device ", name));
  ibv_device_attr attr{};
  if (int rc = ibv_query_device(ctx, &attr); rc != 0) {
    ibv_close_device(ctx);
    return ErrnoToStatus(rc, absl::StrCat("ibv_query_device ", name));
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == nullptr) {
    const int err = errno;
    ibv_close_device(ctx);
    return ErrnoToStatus(err, absl::StrCat("ibv_alloc_pd ", name));
  }
  RKV_LOG(INFO) << "verbs fabric on " << name << " (max_qp_rd_atom " << attr.max_qp_rd_atom
                << ", max_qp_init_rd_atom " << attr.max_qp_init_rd_atom << ")";
  return std::unique_ptr<Fabric>(
      std::make_unique<VerbsFabric>(std::make_shared<VerbsDevice>(ctx, pd, attr, name)));
}

}  // namespace rkv::fabric
