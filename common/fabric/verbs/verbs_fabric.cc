#include "common/fabric/verbs/verbs_fabric.h"

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/fabric/peer_departures.h"
#include "common/fabric/served_tally.h"
#include "common/fabric/verbs/verbs_connect.h"
#include "common/fabric/verbs/verbs_device.h"
#include "common/fabric/work_request_check.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "common/socket.h"
#include "common/status.h"

namespace rkv::fabric {
namespace {

// How often a listener checks that the peers of its connections still answer.
constexpr absl::Duration kProbeInterval = absl::Seconds(2);
// Wait spins this long before it sleeps on the completion channel.
constexpr absl::Duration kSpinBeforeSleep = absl::Microseconds(50);

// One ibv completion channel for the CQs of many queue pairs. Each attached
// CQ is armed when it is created and re-armed as soon as its event is
// taken, so it is always either armed or has an event pending: no
// completion goes unnoticed. Completions made in software (requests posted
// in the error state) raise no CQ event; their queue pair rings an eventfd
// instead. Attached queue pairs must not be destroyed while another thread
// waits on the channel.
class VerbsCompletionChannel final : public CompletionChannel {
 public:
  VerbsCompletionChannel(ibv_comp_channel* channel, Fd wake)
      : channel_(channel), wake_(std::move(wake)) {}
  ~VerbsCompletionChannel() override { ibv_destroy_comp_channel(channel_); }
  ibv_comp_channel* get() const { return channel_; }

  void Notify() {
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
  }

  void Wait(absl::Duration timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    pollfd pfds[2] = {{channel_->fd, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    const timespec ts = absl::ToTimespec(std::min(timeout, absl::Seconds(3600)));
    if (::ppoll(pfds, 2, &ts, nullptr) <= 0) return;
    if (pfds[1].revents & POLLIN) {
      uint64_t rings;
      (void)!::read(wake_.get(), &rings, sizeof(rings));
    }
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    // The fd is non-blocking: take every event there is.
    while (ibv_get_cq_event(channel_, &cq, &context) == 0) {
      ibv_ack_cq_events(cq, 1);
      ibv_req_notify_cq(cq, 0);
    }
  }

 private:
  ibv_comp_channel* const channel_;
  const Fd wake_;  // An eventfd.
  std::mutex mu_;  // One thread takes events at a time.
};

absl::StatusOr<sockaddr_in> ParseAddress(absl::string_view address) {
  RKV_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(address));
  return ToSockaddr(hp);
}

CompletionStatus MapStatus(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return CompletionStatus::kSuccess;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
      return CompletionStatus::kLocalProtectionError;
    case IBV_WC_REM_ACCESS_ERR:
      return CompletionStatus::kRemoteAccessError;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
      return CompletionStatus::kRemoteInvalidRequest;
    case IBV_WC_WR_FLUSH_ERR:
      return CompletionStatus::kFlushed;
    default:
      return CompletionStatus::kRetryExceeded;
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

// What the send queue holds: every request posted and not yet retired, in
// posting order. The device completes an RC send queue in order, so a
// completion retires its own request and every unsignaled one before it.
// This is how Post knows the room left without asking the device, and so
// can refuse a batch whole instead of having the device take part of it.
// The device sees a sequence number as each request's wr_id, not the
// caller's, which need not be unique (many requests may carry 0).
//
// It also checks that every READ and atomic it retires delivered its
// result. Soft-RoCE (Linux 6.1's rdma_rxe) completes an atomic, or a READ
// of one packet, on a plain ACK that covers its PSN, without the response
// that carries the data: under packet loss, when a go-back-N retransmission
// makes the target ACK a duplicate WRITE with the last PSN it executed. The
// request executed; its result buffer was simply never written, and a
// caller that trusts it acts on stale memory (the KV client freed a block
// still in use). So before posting, the last 8 bytes of each READ's buffer
// (of 8 bytes or more) and each atomic's result word get a random
// per-queue-pair sentinel, and a request retired with the sentinel still
// there lost its response: a false alarm needs the true data to equal 64
// random bits. Hardware never trips it; the cost is an 8-byte store per
// request and a compare per retirement.
class SendQueue {
 public:
  SendQueue(uint32_t capacity, uint64_t sentinel) : capacity_(capacity), sentinel_(sentinel) {}
  uint32_t room() const { return capacity_ - static_cast<uint32_t>(device_held_); }

  // Returns the wr_id to give the device. Call before the device may
  // write `w`'s buffer.
  uint64_t Posted(const WorkRequest& w) {
    uint8_t* guard = nullptr;
    if (w.opcode == Opcode::kCas64 || w.opcode == Opcode::kFaa64) {
      guard = static_cast<uint8_t*>(w.local);
    } else if (w.opcode == Opcode::kRead && w.length >= 8) {
      guard = static_cast<uint8_t*>(w.local) + w.length - 8;
    }
    if (guard != nullptr) std::memcpy(guard, &sentinel_, 8);
    entries_.push_back({next_seq_, w.wr_id, w.opcode, false, guard});
    ++device_held_;
    return next_seq_++;
  }
  // A request the device never took; it completes as flushed in its turn.
  void Refused(uint64_t wr_id, Opcode opcode) {
    entries_.push_back({0, wr_id, opcode, true, nullptr});
  }
  // The device took only the requests before the one numbered `seq`.
  void Unposted(uint64_t seq) {
    for (Entry& e : entries_) {
      if (!e.refused && e.seq >= seq) {
        e.refused = true;
        --device_held_;
      }
    }
  }

  // Retires requests through the device-held one numbered `seq` and fills
  // in the caller's wr_id and opcode for it (a device reports no opcode
  // with an error). Returns false if a READ or atomic among them, though
  // completed successfully, never received its result.
  bool Completed(uint64_t seq, bool success, Completion* c) {
    bool delivered = true;
    while (!entries_.empty() && !entries_.front().refused) {
      const Entry e = entries_.front();
      entries_.pop_front();
      --device_held_;
      if (success && e.guard != nullptr && std::memcmp(e.guard, &sentinel_, 8) == 0) {
        delivered = false;
      }
      if (e.seq == seq) {
        c->wr_id = e.wr_id;
        c->opcode = e.opcode;
        break;
      }
    }
    return delivered;
  }
  // Moves refused requests that have reached the front into `out`.
  size_t TakeRefused(absl::Span<Completion> out) {
    size_t n = 0;
    while (n < out.size() && !entries_.empty() && entries_.front().refused) {
      out[n++] = {entries_.front().wr_id, entries_.front().opcode, CompletionStatus::kFlushed, 0};
      entries_.pop_front();
    }
    return n;
  }

 private:
  struct Entry {
    uint64_t seq;
    uint64_t wr_id;
    Opcode opcode;
    bool refused;
    uint8_t* guard;  // Where the sentinel must have been overwritten; or null.
  };
  const uint32_t capacity_;
  const uint64_t sentinel_;
  size_t device_held_ = 0;
  uint64_t next_seq_ = 1;
  std::deque<Entry> entries_;
};

class VerbsQueuePair final : public QueuePair {
 public:
  VerbsQueuePair(std::shared_ptr<VerbsDevice> device,
                 std::shared_ptr<VerbsCompletionChannel> channel,
                 std::unique_ptr<CmConnection> conn, QueuePairLimits limits)
      : device_(std::move(device)),
        channel_(std::move(channel)),
        conn_(std::move(conn)),
        limits_(limits),
        sq_(limits.max_send_wr, RandomSentinel()) {}

  absl::Status Post(absl::Span<const WorkRequest> batch) override {
    if (batch.empty()) return absl::OkStatus();
    std::vector<ibv_send_wr> wrs(batch.size());
    std::vector<ibv_sge> sges(batch.size());
    uint64_t bytes = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const WorkRequest& w = batch[i];
      RKV_RETURN_IF_ERROR(CheckWorkRequest(w, limits_.max_inline_data));
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
          wr.opcode =
              w.opcode == Opcode::kCas64 ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
          wr.wr.atomic.remote_addr = w.remote_addr;
          wr.wr.atomic.rkey = w.rkey;
          wr.wr.atomic.compare_add = w.compare_add;
          wr.wr.atomic.swap = w.swap;
          bytes += 8;
          break;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (batch.size() > sq_.room()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("send queue full: ", batch.size(), " requests posted with room for ",
                       sq_.room(), " (max_send_wr ", limits_.max_send_wr,
                       "); signal a request now and then and poll its completion"));
    }
    counters_.doorbells++;
    counters_.requests += batch.size();
    counters_.bytes += bytes;
    if (error_) {
      // As on hardware, every request posted in the error state is flushed.
      for (const WorkRequest& w : batch) sq_.Refused(w.wr_id, w.opcode);
      if (channel_ != nullptr) channel_->Notify();
      return absl::OkStatus();
    }
    for (size_t i = 0; i < wrs.size(); ++i) wrs[i].wr_id = sq_.Posted(batch[i]);
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(conn_->id->qp, wrs.data(), &bad); rc != 0) {
      // The device took the requests before `bad` and refused the rest,
      // though each was checked above. The batch is accepted, as the
      // contract says, and fails as a whole: the queue pair goes to the
      // error state, the requests it took flush, and the refused ones
      // complete flushed after them.
      RKV_LOG(WARNING) << "verbs queue pair on " << device_->name() << ": ibv_post_send took "
                       << (bad - wrs.data()) << " of " << batch.size()
                       << " requests: " << ErrnoText(rc) << "; the queue pair is now in error";
      sq_.Unposted(bad->wr_id);
      ToErrorLocked();
    }
    return absl::OkStatus();
  }

  size_t Poll(absl::Span<Completion> out) override {
    if (out.empty()) return 0;
    std::lock_guard<std::mutex> lock(mu_);
    if (poll_buf_.size() < out.size()) poll_buf_.resize(out.size());
    const int got = ibv_poll_cq(conn_->cq, static_cast<int>(out.size()), poll_buf_.data());
    size_t n = 0;
    for (int i = 0; i < got; ++i) {
      const ibv_wc& wc = poll_buf_[i];
      CompletionStatus status = MapStatus(wc.status);
      if (status == CompletionStatus::kFlushed && !error_) {
        // Flushed with no error before it: the connection was torn down
        // under the queue pair (the peer disconnected). The contract calls
        // a lost peer kRetryExceeded.
        status = CompletionStatus::kRetryExceeded;
      }
      // After a lost response the device still reports requests that were
      // under way as done; for the caller they are flushed, as after any
      // error.
      if (status == CompletionStatus::kSuccess && response_lost_)
        status = CompletionStatus::kFlushed;
      Completion& c = out[n++];
      c = {0, Opcode::kRead, status, wc.byte_len};
      if (!sq_.Completed(wc.wr_id, status == CompletionStatus::kSuccess, &c)) {
        RKV_LOG(WARNING) << "verbs queue pair on " << device_->name()
                         << ": a READ or atomic completed without its response; failing the "
                            "queue pair (its requests may have executed)";
        c.status = status = CompletionStatus::kResponseLost;
        response_lost_ = true;
        ToErrorLocked();
      }
      if (status != CompletionStatus::kSuccess) {
        error_ = true;
        counters_.error_completions++;
      }
    }
    n += sq_.TakeRefused(out.subspan(n));
    return n;
  }

  size_t Wait(absl::Span<Completion> out, absl::Duration timeout) override {
    // Completions usually arrive in microseconds: spin a little, as verbs
    // clients do, then sleep on the completion channel.
    const absl::Time start = MonotonicNow();
    const absl::Time deadline = start + timeout;
    for (;;) {
      if (size_t n = Poll(out); n > 0) return n;
      const absl::Time now = MonotonicNow();
      if (now >= deadline) return 0;
      if (now - start < kSpinBeforeSleep) continue;
      if (channel_ != nullptr) {  // Shared: it keeps the CQ armed.
        channel_->Wait(deadline - now);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!armed_) {
          ibv_req_notify_cq(conn_->cq, 0);
          armed_ = true;
        }
      }
      // A completion that arrived before the arming raised no event.
      if (size_t n = Poll(out); n > 0) return n;
      pollfd pfd{conn_->comp_channel->fd, POLLIN, 0};
      const int64_t ms =
          absl::ToInt64Milliseconds(absl::Ceil(deadline - now, absl::Milliseconds(1)));
      if (::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, 1000))) > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        ibv_cq* cq = nullptr;
        void* context = nullptr;
        // Non-blocking: another waiter may have taken the event.
        if (ibv_get_cq_event(conn_->comp_channel, &cq, &context) == 0) {
          ibv_ack_cq_events(cq, 1);
          armed_ = false;
        }
      }
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
  static uint64_t RandomSentinel() {
    std::random_device rd;
    return (uint64_t{rd()} << 32) | rd();
  }
  // The device flushes every request it holds, and later posts flush too.
  void ToErrorLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(conn_->id->qp, &attr, IBV_QP_STATE);
    error_ = true;
  }

  const std::shared_ptr<VerbsDevice> device_;
  // Before conn_: outlives the CQ attached to it. Null: conn_ has its own.
  const std::shared_ptr<VerbsCompletionChannel> channel_;
  const std::unique_ptr<CmConnection> conn_;
  const QueuePairLimits limits_;
  mutable std::mutex mu_;
  SendQueue sq_ ABSL_GUARDED_BY(mu_);
  std::vector<ibv_wc> poll_buf_ ABSL_GUARDED_BY(mu_);
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  bool error_ ABSL_GUARDED_BY(mu_) = false;
  bool response_lost_ ABSL_GUARDED_BY(mu_) = false;
  QueuePairCounters counters_ ABSL_GUARDED_BY(mu_);
};

// Accepts queue pairs on one cm id. Connection requests are answered on the
// listener's own thread, one after another; each takes microseconds, so many
// clients connecting at once queue briefly in rdma_cm's backlog.
//
// A target's queue pair posts nothing of its own, so it would never learn
// that its peer is gone: a client cut off by the network, which has given up
// on its side, leaves a half-open connection here, and such connections are
// not only a leak: on rxe a reconnecting client that gets the same QP number
// is refused as a stale connection for as long as the old one stands. So
// every established connection is probed now and then with a zero-length
// RDMA WRITE, which the peer's transport acknowledges without touching
// memory (no R_Key or address is checked for zero length: InfiniBand spec
// C9-88); a probe that fails closes the connection. All accepted queue pairs
// share one CQ, for the probes' completions.
//
// Fence runs on the caller's thread, under the mutex the event thread holds
// while it touches the connections, so that it finds every connection
// accepted from the peer and no connect request is answered half way
// through it.
class VerbsListener final : public Listener {
 public:
  VerbsListener(std::shared_ptr<VerbsDevice> device, std::unique_ptr<CmConnection> listen,
                ibv_cq* cq, std::string address, std::string token)
      : device_(std::move(device)),
        listen_(std::move(listen)),
        cq_(cq),
        address_(std::move(address)),
        token_(std::move(token)) {
    thread_ = std::thread([this] { EventLoop(); });
  }
  ~VerbsListener() override {
    stopping_.store(true);
    thread_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      accepted_.clear();  // Disconnects and destroys each accepted QP.
    }
    ibv_destroy_cq(cq_);
  }
  Endpoint endpoint() const override { return {address_, token_}; }

  // Why no request of the peer executes once Fence returns: ibv_modify_qp
  // to IBV_QPS_ERR returns once the device has moved the QP to the Error
  // state, and a QP in Error executes no incoming request: the responder
  // drops the packets (rxe checks the QP's state as each one arrives). A
  // packet the device was executing at that moment may finish; Close then
  // destroys the QP, and destruction waits out the device's work on it
  // (rxe stops the QP's responder task; hardware retires the QP context).
  // So every request of the peer ran before Fence returned or never runs,
  // but for the rest of a multi-packet WRITE cut short. The initiator
  // learns of it as of a lost target: its requests go unanswered until the
  // transport gives up (kRetryExceeded, about 2 s), or the disconnect
  // flushes them.
  absl::Status Fence(uint64_t peer_id) override {
    if (peer_id == 0) return absl::InvalidArgumentError("Fence: 0 names no peer");
    std::lock_guard<std::mutex> lock(mu_);
    fenced_.insert(peer_id);
    int closed = 0;
    for (auto it = accepted_.begin(); it != accepted_.end();) {
      auto next = std::next(it);
      if (it->second.peer_id == peer_id) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        if (const int rc = ibv_modify_qp(it->first->qp, &attr, IBV_QP_STATE); rc != 0) {
          // Destroying the QP below stops it all the same.
          RKV_LOG(WARNING) << "verbs fabric " << address_
                           << ": ibv_modify_qp(IBV_QPS_ERR) while fencing peer " << peer_id << ": "
                           << ErrnoText(rc);
        }
        Close(it);  // Disconnects, destroys the QP and the cm id.
        ++closed;
      }
      it = next;
    }
    RKV_LOG(INFO) << "verbs fabric " << address_ << ": fenced peer " << peer_id << " (" << closed
                  << " queue pair(s) closed)";
    return absl::OkStatus();
  }

  // A client process that exits destroys its cm ids, whose connections
  // the kernel disconnects: the event thread sees them go at once.
  std::vector<uint64_t> TakeDeparted() override { return departures_.Take(); }

  // Connections only: the NIC executes peers' READs, WRITEs and atomics
  // without this CPU, which never learns of them, so every request and
  // byte figure stays 0: the device's port counters are the place for
  // that traffic.
  ListenerCounters counters() const override { return tally_.Read(); }

  // The probes in flight at once are bounded by the shared CQ.
  static constexpr int kCqEntries = 4096;

 private:
  struct Accepted {
    std::unique_ptr<CmConnection> conn;
    uint64_t serial = 0;  // A probe's wr_id: cm ids' addresses are reused.
    uint64_t peer_id = 0;
    bool established = false;
    bool probing = false;
  };

  void EventLoop() {
    absl::Time last_probe = MonotonicNow();
    while (!stopping_.load()) {
      pollfd pfd{listen_->channel->fd, POLLIN, 0};
      const bool ready = ::poll(&pfd, 1, 100) > 0;
      std::lock_guard<std::mutex> lock(mu_);
      // Every event poll saw: the channel is non-blocking, and a cm id's
      // events must be acknowledged before it can be destroyed.
      if (ready) {
        while (HandleCmEvent()) {
        }
      }
      ReapProbes();
      if (MonotonicNow() - last_probe >= kProbeInterval) {
        SendProbes();
        last_probe = MonotonicNow();
      }
    }
  }

  // Handles one event; false when there was none.
  bool HandleCmEvent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(listen_->channel, &event) != 0) return false;
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      OnConnectRequest(event);  // Acks the event.
      return true;
    }
    const rdma_cm_event_type type = event->event;
    rdma_cm_id* id = event->id;
    rdma_ack_cm_event(event);
    auto it = accepted_.find(id);
    if (it == accepted_.end()) return true;
    if (type == RDMA_CM_EVENT_ESTABLISHED) {
      it->second.established = true;
    } else if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_REJECTED ||
               type == RDMA_CM_EVENT_CONNECT_ERROR || type == RDMA_CM_EVENT_UNREACHABLE) {
      Close(it);
    }
    return true;
  }

  void SendProbes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Half the CQ: the rest takes completions of closed connections' probes.
    int room = kCqEntries / 2 - probes_in_flight_;
    for (auto& [id, a] : accepted_) {
      if (room == 0) break;
      if (!a.established || a.probing) continue;
      ibv_send_wr wr{};
      wr.wr_id = a.serial;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(id->qp, &wr, &bad) != 0) continue;  // Probed next time.
      a.probing = true;
      ++probes_in_flight_;
      --room;
    }
  }

  void ReapProbes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ibv_wc wc[32];
    int n;
    while ((n = ibv_poll_cq(cq_, 32, wc)) > 0) {
      for (int i = 0; i < n; ++i) {
        auto by_serial = serials_.find(wc[i].wr_id);
        if (by_serial == serials_.end()) continue;  // Its connection was closed.
        auto it = accepted_.find(by_serial->second);
        --probes_in_flight_;
        it->second.probing = false;
        if (wc[i].status != IBV_WC_SUCCESS) {
          RKV_LOG(WARNING) << "verbs fabric " << address_ << ": a peer stopped answering ("
                           << ibv_wc_status_str(wc[i].status) << "); its connection is closed";
          Close(it);
        }
      }
    }
  }

  void Close(std::map<rdma_cm_id*, Accepted>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // A probe in flight may still complete into the CQ; it will find no
    // connection.
    if (it->second.probing) --probes_in_flight_;
    serials_.erase(it->second.serial);
    departures_.Closed(it->second.peer_id);
    tally_.Closed();
    accepted_.erase(it);
  }

  void OnConnectRequest(rdma_cm_event* event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    rdma_cm_id* const id = event->id;
    absl::StatusOr<CmAccepted> accepted = AcceptCm(
        *device_, event, token_,
        [this](uint64_t peer_id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return fenced_.contains(peer_id);  // mu_ is held: see the caller.
        },
        cq_);
    if (!accepted.ok()) {
      RKV_LOG(WARNING) << "verbs fabric " << address_ << ": " << accepted.status().message();
      return;
    }
    Accepted& a = accepted_[id];
    a.conn = std::move(accepted->conn);
    a.peer_id = accepted->peer_id;
    a.serial = ++last_serial_;
    serials_[a.serial] = id;
    departures_.Opened(a.peer_id);
    tally_.Accepted();
  }

  const std::shared_ptr<VerbsDevice> device_;
  const std::unique_ptr<CmConnection> listen_;
  ibv_cq* const cq_;
  const std::string address_;
  const std::string token_;
  std::atomic<bool> stopping_{false};
  // The event thread's, and Fence's.
  std::mutex mu_;
  std::map<rdma_cm_id*, Accepted> accepted_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, rdma_cm_id*> serials_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> fenced_ ABSL_GUARDED_BY(mu_);  // Peer ids.
  PeerDepartures departures_;
  // Written under mu_ (one writer at a time), read by counters() anywhere.
  ServedTally tally_;
  uint64_t last_serial_ ABSL_GUARDED_BY(mu_) = 0;
  int probes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
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
    return std::unique_ptr<MemoryRegion>(std::make_unique<VerbsMemoryRegion>(device_, mr, access));
  }

  absl::StatusOr<std::unique_ptr<Listener>> Listen(const ListenOptions& options) override {
    if (options.token.size() > kMaxVerbsToken) {
      return absl::InvalidArgumentError(
          absl::StrCat("verbs connection tokens are at most ", kMaxVerbsToken, " bytes"));
    }
    RKV_ASSIGN_OR_RETURN(sockaddr_in sa, ParseAddress(options.address));
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<CmConnection> conn,
                         ListenCm(*device_, sa, options.address));
    const std::string what = absl::StrCat("verbs listen on ", options.address);
    ibv_cq* cq = ibv_create_cq(device_->ctx(), VerbsListener::kCqEntries, nullptr, nullptr, 0);
    if (cq == nullptr) return ErrnoToStatus(errno, absl::StrCat(what, ": ibv_create_cq"));
    const std::string host = options.address.substr(0, options.address.rfind(':'));
    std::string address = absl::StrCat(host, ":", ntohs(rdma_get_src_port(conn->id)));
    return std::unique_ptr<Listener>(std::make_unique<VerbsListener>(
        device_, std::move(conn), cq, std::move(address), options.token));
  }

  absl::StatusOr<std::shared_ptr<CompletionChannel>> NewCompletionChannel() override {
    Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake.valid()) return ErrnoToStatus(errno, "eventfd");
    ibv_comp_channel* channel = ibv_create_comp_channel(device_->ctx());
    if (channel == nullptr) return ErrnoToStatus(errno, "ibv_create_comp_channel");
    SetNonBlocking(channel->fd);
    return std::make_shared<VerbsCompletionChannel>(channel, std::move(wake));
  }

  absl::StatusOr<std::unique_ptr<QueuePair>> Connect(const Endpoint& endpoint,
                                                     const QueuePairOptions& options) override {
    if (endpoint.token.size() > kMaxVerbsToken) {
      return absl::InvalidArgumentError(
          absl::StrCat("verbs connection tokens are at most ", kMaxVerbsToken, " bytes"));
    }
    RKV_ASSIGN_OR_RETURN(sockaddr_in sa, ParseAddress(endpoint.address));
    auto shared = std::dynamic_pointer_cast<VerbsCompletionChannel>(options.channel);
    if (options.channel != nullptr && shared == nullptr) {
      return absl::InvalidArgumentError("Connect: the completion channel is another fabric's");
    }
    RKV_ASSIGN_OR_RETURN(
        CmConnected connected,
        ConnectCm(*device_, sa, endpoint, options, shared != nullptr ? shared->get() : nullptr));
    // The CQ holds max_send_wr completions, so the send queue is limited to
    // what was asked for, though the device may have granted more: the CQ
    // can never overrun.
    QueuePairLimits limits{options.max_send_wr, connected.max_inline_data,
                           static_cast<uint32_t>(device_->rd_atomic_initiator())};
    return std::unique_ptr<QueuePair>(std::make_unique<VerbsQueuePair>(
        device_, std::move(shared), std::move(connected.conn), limits));
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
  ibv_free_device_list(list);
  // The contexts rdma_cm's ids will carry (see VerbsDevice).
  ibv_context** contexts = rdma_get_devices(&num);
  if (contexts == nullptr || num == 0) {
    const int err = errno;
    if (contexts != nullptr) rdma_free_devices(contexts);
    return absl::FailedPreconditionError(
        absl::StrCat("RDMA devices exist but rdma_cm cannot open them (", ErrnoText(err),
                     "): is the rdma_ucm kernel module loaded (/dev/infiniband/rdma_cm)?"));
  }
  ibv_context* ctx = nullptr;
  std::string names;
  for (int i = 0; i < num; ++i) {
    const char* name = ibv_get_device_name(contexts[i]->device);
    absl::StrAppend(&names, i ? ", " : "", name);
    if (ctx == nullptr && (options.rdma_device.empty() || options.rdma_device == name)) {
      ctx = contexts[i];
    }
  }
  rdma_free_devices(contexts);
  if (ctx == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("RDMA device '", options.rdma_device, "' not found; this host has: ", names));
  }
  const std::string name = ibv_get_device_name(ctx->device);
  ibv_device_attr attr{};
  if (int rc = ibv_query_device(ctx, &attr); rc != 0) {
    return ErrnoToStatus(rc, absl::StrCat("ibv_query_device ", name));
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == nullptr) return ErrnoToStatus(errno, absl::StrCat("ibv_alloc_pd ", name));
  RKV_LOG(INFO) << "verbs fabric on " << name << " (max_qp_wr " << attr.max_qp_wr
                << ", max_qp_rd_atom " << attr.max_qp_rd_atom << ", max_qp_init_rd_atom "
                << attr.max_qp_init_rd_atom << ")";
  return std::unique_ptr<Fabric>(
      std::make_unique<VerbsFabric>(std::make_shared<VerbsDevice>(ctx, pd, attr, name)));
}

}  // namespace rkv::fabric
