// One event loop of the soft target over TCP: a thread that waits on epoll
// for the connections it was given and serves each of them
// (SoftTargetConnection). A connection stays on its loop for life, so its
// requests execute in order; a slow or silent peer only waits on its own
// socket, never holding up the others.
#ifndef RKV_COMMON_FABRIC_SOFT_SOFT_TARGET_LOOP_H_
#define RKV_COMMON_FABRIC_SOFT_SOFT_TARGET_LOOP_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/fabric/served_tally.h"
#include "common/fabric/soft/soft_target_connection.h"
#include "common/socket.h"

namespace rkv::fabric {

class SoftTargetLoop {
 public:
  // `context` must outlive the loop.
  static absl::StatusOr<std::unique_ptr<SoftTargetLoop>> Create(const SoftTargetContext& context);
  // Stops the thread and closes every connection (peers see it end).
  ~SoftTargetLoop();
  SoftTargetLoop(const SoftTargetLoop&) = delete;
  SoftTargetLoop& operator=(const SoftTargetLoop&) = delete;

  // Hands over a freshly accepted, non-blocking socket. Thread-safe.
  void Adopt(Fd fd);

  // Closes this loop's established connections from `peer_id`, and
  // returns once it has: requests execute on the loop's thread only, in
  // turns, so from then on none of theirs does. The caller has added the id
  // to the context's fenced peers first, so that a handshake the sweep did
  // not see is refused. Thread-safe; not to be called by the loop itself.
  void Fence(uint64_t peer_id);

  // What this loop's connections were served (Listener::counters).
  // Thread-safe.
  ListenerCounters counters() const { return served_.Read(); }

 private:
  SoftTargetLoop(const SoftTargetContext& context, Fd epoll, Fd wake);
  void Run();
  void RunLoop();
  void Wake();
  // Registers what Adopt queued and carries out what Fence asked; false
  // once the loop is stopping.
  bool TakeIncoming();
  void Close(uint64_t id);
  // Closes connections whose handshake ran out of time; returns the
  // epoll_wait timeout (ms) until the next deadline, -1 for none.
  int ExpireHandshakes();

  const SoftTargetContext& context_;
  const Fd epoll_;
  const Fd wake_;  // eventfd: Adopt and the destructor ring it.

  std::mutex mu_;
  std::vector<Fd> incoming_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Fence's requests: the peer ids to sweep, and tickets that say which
  // requests the loop has carried out (fences_done_ reaches a caller's).
  std::vector<uint64_t> fences_ ABSL_GUARDED_BY(mu_);
  uint64_t fences_asked_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fences_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;  // Run has returned.
  std::condition_variable fenced_;

  // The rest belongs to the loop's thread. Ids, not pointers, go to epoll
  // and the deadline queue, so that a stale entry finds nothing.
  struct Entry {
    std::unique_ptr<SoftTargetConnection> connection;
    bool ready = false;  // Queued in ready_.
  };
  uint64_t next_id_ = 1;  // 0 is the wake-up eventfd.
  // Written by the connections, on the loop's thread alone (or by the
  // destructor's, once that has ended); before them, which count their
  // close as they go.
  ServedTally served_;
  absl::flat_hash_map<uint64_t, Entry> connections_;
  std::vector<uint64_t> ready_;  // To serve this turn.
  // Handshake deadlines, in adoption order and so in time order.
  std::deque<std::pair<absl::Time, uint64_t>> handshakes_;

  std::thread thread_;  // Last: starts once everything above exists.
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SOFT_SOFT_TARGET_LOOP_H_
