// Initiator side of the soft fabric over TCP.
//
// No thread of its own: whoever calls Post, Poll or Wait moves the bytes.
// The socket is non-blocking. Requests are encoded into an output backlog
// that is written as the socket takes it; responses are read into a buffer
// (large READ payloads straight into their destination) and complete the
// send queue in order. A Post whose bytes the socket cannot take yet reads
// responses while it waits: the target stops reading requests while its
// responses are not read, so a Post that only waited to write could wait
// forever.
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/fabric/soft/soft_queue_pair.h"
#include "common/fabric/soft/soft_tcp.h"
#include "common/fabric/soft/soft_wire.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "common/socket.h"
#include "common/status.h"

namespace rkv::fabric {
namespace {

// Responses are read into a buffer of this size; a READ payload that does
// not fit with its header goes straight into its destination instead.
constexpr size_t kInputBytes = 64 << 10;
// A Post waiting for the socket to take its bytes looks again after this
// long even if poll() reported nothing: a guard, not a mechanism.
constexpr absl::Duration kPostRecheck = absl::Seconds(1);

// The time left until `deadline`, for ppoll/epoll_pwait2 (null: forever).
const timespec* TimeLeft(absl::Time deadline, timespec* ts) {
  if (deadline == absl::InfiniteFuture()) return nullptr;
  *ts = absl::ToTimespec(std::max(deadline - MonotonicNow(), absl::ZeroDuration()));
  return ts;
}

// Ends another thread's sleep in poll(): an eventfd the sleeper polls too.
// The owner's mutex guards it, and the sleeper checks its condition under
// that mutex before it sleeps, so a wakeup cannot slip in between. Only the
// last sleeper to leave drains it, so one Ring wakes every sleeper.
class WakeFd {
 public:
  // Creates the eventfd on first use: queue pairs that nobody waits on
  // directly need no second descriptor.
  bool Open() {
    if (!fd_.valid()) fd_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    return fd_.valid();
  }
  int fd() const { return fd_.get(); }
  void AddSleeper() { sleepers_++; }
  void RemoveSleeper() {
    if (--sleepers_ == 0 && rung_) {
      uint64_t value;
      while (::read(fd_.get(), &value, sizeof(value)) < 0 && errno == EINTR) {
      }
      rung_ = false;
    }
  }
  void Ring() {
    if (sleepers_ == 0 || rung_) return;
    const uint64_t one = 1;
    while (::write(fd_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    rung_ = true;
  }

 private:
  Fd fd_;
  int sleepers_ = 0;
  bool rung_ = false;
};

// The TCP completion channel. Its queue pairs notify it of each completion
// they queue, wherever it was queued: the contract counts completions a
// Poll took since the last Wait, and callers rely on that (a client that
// polls, finds its round done and posts the next one later, then waits).
// Response bytes that nobody has read yet are announced by the sockets
// themselves: they are an epoll set, edge-triggered, so that each arrival
// ends a wait once. Edge- rather than level-triggered because a socket may
// stay readable with nobody to read it (a queue pair that faulty_fabric
// keeps alive, unpolled, after its connection "broke"): level-triggered,
// every wait would end at once. Queue pairs read their sockets until they
// would block, so an edge is never left unanswered.
class SoftTcpCompletionChannel final : public SoftCompletionChannel {
 public:
  static absl::StatusOr<std::shared_ptr<SoftTcpCompletionChannel>> Create(
      absl::Duration busy_poll) {
    auto channel =
        std::shared_ptr<SoftTcpCompletionChannel>(new SoftTcpCompletionChannel(busy_poll));
    channel->epoll_fd_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!channel->epoll_fd_.valid()) return ErrnoToStatus(errno, "epoll_create1");
    std::lock_guard<std::mutex> lock(channel->mu_);
    if (!channel->wake_.Open()) return ErrnoToStatus(errno, "eventfd");
    // Level-triggered: it stays readable until the last sleeper drains it.
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = channel->wake_.fd();
    if (::epoll_ctl(channel->epoll_fd_.get(), EPOLL_CTL_ADD, channel->wake_.fd(), &ev) != 0) {
      return ErrnoToStatus(errno, "epoll_ctl");
    }
    return channel;
  }

  absl::Status Attach(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;  // Never used to find the queue pair: it may be gone.
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return ErrnoToStatus(errno, "epoll_ctl(ADD)");
    }
    return absl::OkStatus();
  }
  void Detach(int fd) { ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr); }

  void Notify() override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = true;
    wake_.Ring();
  }

  void Wait(absl::Duration timeout) override {
    const absl::Time deadline = MonotonicNow() + timeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (std::exchange(pending_, false)) return;
      wake_.AddSleeper();
    }
    epoll_event events[64];
    int n = 0;
    const absl::Time spin_until = std::min(deadline, MonotonicNow() + busy_poll_);
    while (n == 0 && MonotonicNow() < spin_until) n = ::epoll_wait(epoll_fd_.get(), events, 64, 0);
    timespec ts;
    // Returns for an event, the timeout, or EINTR (early is allowed).
    if (n == 0) ::epoll_pwait2(epoll_fd_.get(), events, 64, TimeLeft(deadline, &ts), nullptr);
    std::lock_guard<std::mutex> lock(mu_);
    wake_.RemoveSleeper();
    pending_ = false;  // The caller polls its queue pairs next.
  }

 private:
  explicit SoftTcpCompletionChannel(absl::Duration busy_poll) : busy_poll_(busy_poll) {}

  const absl::Duration busy_poll_;
  Fd epoll_fd_;
  std::mutex mu_;
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  WakeFd wake_ ABSL_GUARDED_BY(mu_);
};

class SoftTcpQueuePair final : public SoftQueuePair {
 public:
  SoftTcpQueuePair(std::shared_ptr<const MemoryTable> local, const QueuePairOptions& options, Fd fd,
                   std::shared_ptr<SoftTcpCompletionChannel> channel, absl::Duration busy_poll)
      : SoftQueuePair(std::move(local), options),
        busy_poll_(busy_poll),
        fd_(std::move(fd)),
        channel_(std::move(channel)),
        input_(new uint8_t[kInputBytes]) {}

  ~SoftTcpQueuePair() override {
    if (channel_ != nullptr) channel_->Detach(fd_.get());
  }

  size_t Poll(absl::Span<Completion> out) override;
  size_t Wait(absl::Span<Completion> out, absl::Duration timeout) override;

 private:
  absl::Status Submit(std::vector<Pending> batch) override;

  // Writes the backlog until it is empty or the socket would block.
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Reads and handles responses until the socket would block.
  void ReceiveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Handles the whole responses in the input buffer; false when the
  // connection must be dropped.
  bool ParseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Closes the connection: what is outstanding fails (kRetryExceeded first).
  void DropLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Wakes a Wait on another thread for completions that are queued but
  // not being returned: no socket event would tell it of them. (The
  // channel was notified as they were queued.)
  void AnnounceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration busy_poll_;  // Wait spins this long before it sleeps.
  const Fd fd_;
  const std::shared_ptr<SoftTcpCompletionChannel> channel_;  // May be null.

  // Held while moving bytes, never while sleeping, so that a Post and a
  // Poll on different threads each find the socket free soon. Every change
  // to the send queue happens under it (admission and completion both), so
  // its holder may use the front request's buffer without mu_. Taken
  // before mu_.
  std::mutex io_mu_;
  // Set once the connection is dropped; read without io_mu_ by a sleeper
  // deciding whether the socket is worth polling.
  std::atomic<bool> closed_{false};
  // Encoded requests not yet taken by the socket: out_[out_pos_..].
  std::string out_ ABSL_GUARDED_BY(io_mu_);
  size_t out_pos_ ABSL_GUARDED_BY(io_mu_) = 0;
  // Bytes ever queued and written, so that a Post knows when its own are out.
  uint64_t out_queued_ ABSL_GUARDED_BY(io_mu_) = 0;
  uint64_t out_written_ ABSL_GUARDED_BY(io_mu_) = 0;
  // Response bytes read but not yet handled: input_[in_begin_, in_end_).
  const std::unique_ptr<uint8_t[]> input_ ABSL_PT_GUARDED_BY(io_mu_);
  size_t in_begin_ ABSL_GUARDED_BY(io_mu_) = 0;
  size_t in_end_ ABSL_GUARDED_BY(io_mu_) = 0;
  // A READ payload being read straight into its destination.
  uint8_t* direct_dst_ ABSL_GUARDED_BY(io_mu_) = nullptr;
  size_t direct_left_ ABSL_GUARDED_BY(io_mu_) = 0;
  uint32_t direct_length_ ABSL_GUARDED_BY(io_mu_) = 0;

  WakeFd wake_ ABSL_GUARDED_BY(mu_);
};

absl::Status SoftTcpQueuePair::Submit(std::vector<Pending> batch) {
  uint64_t mark;
  {
    std::lock_guard<std::mutex> io_lock(io_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      const size_t before = outstanding_.size();
      RKV_RETURN_IF_ERROR(AdmitLocked(batch));
      // Keep the backlog from growing by what it already wrote.
      if (out_pos_ == out_.size()) {
        out_.clear();
        out_pos_ = 0;
      } else if (out_pos_ >= out_.size() / 2) {
        out_.erase(0, out_pos_);
        out_pos_ = 0;
      }
      const size_t backlog_before = out_.size();
      // Admission either completed everything (error state, or the
      // connection is gone) or appended the new requests behind the
      // `before` already outstanding.
      const size_t first_new = outstanding_.empty() ? 0 : before;
      for (size_t i = first_new; i < outstanding_.size(); ++i) {
        const Pending& p = outstanding_[i];
        if (p.refused != CompletionStatus::kSuccess) break;  // Later ones flush behind it.
        uint8_t header[wire::kRequestHeaderBytes];
        wire::EncodeRequestHeader({p.remote()}, header);
        out_.append(reinterpret_cast<const char*>(header), sizeof(header));
        if (p.wr.opcode == Opcode::kWrite) {
          out_.append(reinterpret_cast<const char*>(p.write_source()), p.wr.length);
        }
      }
      out_queued_ += out_.size() - backlog_before;
    }
    mark = out_queued_;
    FlushLocked();
  }
  // The batch is posted once the socket has taken all of it. Until then
  // read responses: the target may be blocked writing them.
  for (;;) {
    {
      std::lock_guard<std::mutex> io_lock(io_mu_);
      if (closed_ || out_written_ >= mark) break;
      ReceiveLocked();
      FlushLocked();
      if (closed_ || out_written_ >= mark) break;
    }
    pollfd pfd{fd_.get(), POLLIN | POLLOUT, 0};
    const timespec ts = absl::ToTimespec(kPostRecheck);
    ::ppoll(&pfd, 1, &ts, nullptr);
  }
  std::lock_guard<std::mutex> lock(mu_);
  AnnounceLocked();
  return absl::OkStatus();
}

void SoftTcpQueuePair::FlushLocked() {
  while (!closed_ && out_pos_ < out_.size()) {
    const ssize_t n = ::send(fd_.get(), out_.data() + out_pos_, out_.size() - out_pos_,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_pos_ += static_cast<size_t>(n);
      out_written_ += static_cast<uint64_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      RKV_LOG(DEBUG) << "soft fabric: send: " << std::strerror(errno);
      return DropLocked();
    }
  }
  if (out_pos_ == out_.size() && out_.capacity() > (4 << 20)) {
    // A batch of large WRITEs went out; do not keep its memory.
    std::string().swap(out_);
    out_pos_ = 0;
  }
}

void SoftTcpQueuePair::ReceiveLocked() {
  while (!closed_) {
    ssize_t n;
    size_t asked;
    if (direct_left_ > 0) {
      asked = direct_left_;
      n = ::recv(fd_.get(), direct_dst_, asked, MSG_DONTWAIT);
      if (n > 0) {
        direct_dst_ += n;
        direct_left_ -= static_cast<size_t>(n);
        if (direct_left_ == 0) {
          std::lock_guard<std::mutex> lock(mu_);
          CompleteFrontLocked(CompletionStatus::kSuccess, direct_length_);
        }
      }
    } else {
      if (in_begin_ == in_end_) {
        in_begin_ = in_end_ = 0;
      } else if (in_end_ == kInputBytes) {
        // What is left is one partial response, which fits once moved.
        std::memmove(input_.get(), input_.get() + in_begin_, in_end_ - in_begin_);
        in_end_ -= in_begin_;
        in_begin_ = 0;
      }
      asked = kInputBytes - in_end_;
      n = ::recv(fd_.get(), input_.get() + in_end_, asked, MSG_DONTWAIT);
      if (n > 0) {
        in_end_ += static_cast<size_t>(n);
        if (!ParseLocked()) return DropLocked();
      }
    }
    if (n > 0) {
      // A short read took everything there was. Anything arriving later is
      // a new edge for the channel and a new POLLIN for a sleeper.
      if (static_cast<size_t>(n) < asked) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0) RKV_LOG(DEBUG) << "soft fabric: recv: " << std::strerror(errno);
    return DropLocked();  // Closed by the target, or broken.
  }
}

bool SoftTcpQueuePair::ParseLocked() {
  std::lock_guard<std::mutex> lock(mu_);
  while (in_end_ - in_begin_ >= wire::kResponseHeaderBytes) {
    const uint8_t* at = input_.get() + in_begin_;
    absl::StatusOr<wire::ResponseHeader> h =
        wire::DecodeResponseHeader({reinterpret_cast<const char*>(at), wire::kResponseHeaderBytes});
    if (!h.ok()) {
      RKV_LOG(WARNING) << "soft fabric: protocol error from target: " << h.status();
      return false;
    }
    if (outstanding_.empty() || outstanding_.front().refused != CompletionStatus::kSuccess) {
      // In the error state requests already sent may still answer; they
      // were flushed, and the connection is of no more use.
      if (!InErrorLocked()) {
        RKV_LOG(WARNING) << "soft fabric: protocol error from target: response without a request";
      }
      return false;
    }
    const WorkRequest& wr = outstanding_.front().wr;
    const bool read_ok = wr.opcode == Opcode::kRead && h->status == CompletionStatus::kSuccess;
    if (h->length != (read_ok ? wr.length : 0)) {
      RKV_LOG(WARNING) << "soft fabric: protocol error from target: response of " << h->length
                       << " bytes to a request of " << wr.length;
      return false;
    }
    const size_t have = in_end_ - in_begin_ - wire::kResponseHeaderBytes;
    if (read_ok && have < wr.length) {
      // Wait for the rest in the buffer if it fits there; else copy what
      // came and read the rest where it belongs.
      if (wire::kResponseHeaderBytes + wr.length <= kInputBytes) return true;
      std::memcpy(wr.local, at + wire::kResponseHeaderBytes, have);
      direct_dst_ = static_cast<uint8_t*>(wr.local) + have;
      direct_left_ = wr.length - have;
      direct_length_ = wr.length;
      in_begin_ = in_end_;
      return true;
    }
    if (read_ok) std::memcpy(wr.local, at + wire::kResponseHeaderBytes, wr.length);
    if (h->status == CompletionStatus::kSuccess &&
        (wr.opcode == Opcode::kCas64 || wr.opcode == Opcode::kFaa64)) {
      std::memcpy(wr.local, &h->value, 8);
    }
    in_begin_ += wire::kResponseHeaderBytes + (read_ok ? wr.length : 0);
    CompleteFrontLocked(h->status, wr.length);
    // After an error the target closes the connection; so do we.
    if (h->status != CompletionStatus::kSuccess) return false;
  }
  return true;
}

void SoftTcpQueuePair::DropLocked() {
  if (closed_) return;
  closed_ = true;
  // The descriptor stays open (and in the channel's set) until the queue
  // pair is destroyed; shutting it down tells the target at once.
  ::shutdown(fd_.get(), SHUT_RDWR);
  out_written_ = out_queued_;
  std::string().swap(out_);
  out_pos_ = 0;
  in_begin_ = in_end_ = 0;
  direct_left_ = 0;
  std::lock_guard<std::mutex> lock(mu_);
  ConnectionLostLocked();
}

void SoftTcpQueuePair::AnnounceLocked() {
  if (HasCompletionsLocked()) wake_.Ring();
}

size_t SoftTcpQueuePair::Poll(absl::Span<Completion> out) {
  {
    std::lock_guard<std::mutex> io_lock(io_mu_);
    FlushLocked();
    ReceiveLocked();
  }
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = TakeCompletionsLocked(out);
  AnnounceLocked();
  return n;
}

size_t SoftTcpQueuePair::Wait(absl::Span<Completion> out, absl::Duration timeout) {
  size_t n = Poll(out);
  if (n > 0 || timeout <= absl::ZeroDuration()) return n;
  const absl::Time deadline = MonotonicNow() + timeout;
  for (const absl::Time until = std::min(deadline, MonotonicNow() + busy_poll_);
       MonotonicNow() < until;) {
    if ((n = Poll(out)) > 0) return n;
  }
  for (;;) {
    int wake_fd = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Completions queued since the last look (by a Post on another
      // thread, say) would make no socket readable.
      if (HasCompletionsLocked()) {
        n = TakeCompletionsLocked(out);
        AnnounceLocked();
        return n;
      }
      if (wake_.Open()) {
        wake_.AddSleeper();
        wake_fd = wake_.fd();
      }
    }
    // A dropped connection's socket is always readable; only a Post can
    // bring completions then.
    pollfd pfds[2] = {{closed_ ? -1 : fd_.get(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
    timespec ts;
    const timespec* limit = TimeLeft(deadline, &ts);
    if (wake_fd < 0 &&
        (limit == nullptr || absl::DurationFromTimespec(ts) > absl::Milliseconds(1))) {
      // Out of descriptors: nothing can ring us, so look again soon.
      ts = absl::ToTimespec(absl::Milliseconds(1));
      limit = &ts;
    }
    ::ppoll(pfds, 2, limit, nullptr);
    if (wake_fd >= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      wake_.RemoveSleeper();
    }
    n = Poll(out);
    if (n > 0 || MonotonicNow() >= deadline) return n;
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<CompletionChannel>> NewSoftTcpCompletionChannel(
    absl::Duration busy_poll) {
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<SoftTcpCompletionChannel> channel,
                       SoftTcpCompletionChannel::Create(busy_poll));
  return std::shared_ptr<CompletionChannel>(std::move(channel));
}

absl::StatusOr<std::unique_ptr<QueuePair>> ConnectSoftTcp(std::shared_ptr<const MemoryTable> local,
                                                          const Endpoint& endpoint,
                                                          const QueuePairOptions& options,
                                                          absl::Duration busy_poll) {
  std::shared_ptr<SoftTcpCompletionChannel> channel;
  if (options.channel != nullptr) {
    channel = std::dynamic_pointer_cast<SoftTcpCompletionChannel>(options.channel);
    if (channel == nullptr) {
      return absl::InvalidArgumentError(
          "Connect: the completion channel is not a soft TCP fabric's");
    }
  }
  RKV_ASSIGN_OR_RETURN(HostPort where, ParseHostPort(endpoint.address));
  RKV_ASSIGN_OR_RETURN(Fd fd, ConnectTcp(where, options.connect_timeout));
  const std::string what = absl::StrCat("soft fabric handshake with ", endpoint.address);
  if (endpoint.token.size() > wire::kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("connection token longer than ", wire::kMaxTokenBytes, " bytes"));
  }
  const std::string hello = wire::EncodeHello({wire::kVersion, endpoint.token, options.peer_id});
  RKV_RETURN_IF_ERROR(WriteFull(fd.get(), hello.data(), hello.size()));
  RKV_RETURN_IF_ERROR(SetReceiveTimeout(fd.get(), options.connect_timeout));
  std::string reply(wire::kHelloReplyBytes, '\0');
  if (absl::Status s = ReadFull(fd.get(), reply.data(), reply.size()); !s.ok()) {
    return absl::UnavailableError(absl::StrCat(what, ": ", s.message()));
  }
  RKV_RETURN_IF_ERROR(SetReceiveTimeout(fd.get(), absl::ZeroDuration()));
  RKV_ASSIGN_OR_RETURN(wire::HelloStatus status, wire::DecodeHelloReply(reply));
  switch (status) {
    case wire::HelloStatus::kOk:
      break;
    case wire::HelloStatus::kBadVersion:
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": protocol version mismatch (this build speaks version ", wire::kVersion, ")"));
    case wire::HelloStatus::kBadToken:
      return absl::PermissionDeniedError(absl::StrCat(what, ": connection token rejected"));
    case wire::HelloStatus::kFenced:
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the target fenced peer id ", options.peer_id));
  }
  // From here on nothing blocks on the socket: see the top of this file.
  if (const int flags = ::fcntl(fd.get(), F_GETFL);
      flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoToStatus(errno, "fcntl(O_NONBLOCK)");
  }
  if (channel != nullptr) RKV_RETURN_IF_ERROR(channel->Attach(fd.get()));
  return std::unique_ptr<QueuePair>(std::make_unique<SoftTcpQueuePair>(
      std::move(local), options, std::move(fd), std::move(channel), busy_poll));
}

}  // namespace rkv::fabric
