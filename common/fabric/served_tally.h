// Counts what a listener serves (ListenerCounters) where it is served: on
// the thread that executes its peers' requests, which must not pay for the
// count with a locked read-modify-write on a cache line that other threads
// write too. So a tally has one writer at a time (one event loop's thread,
// or whoever holds the lock that serialises the writers) and an update is a
// relaxed load and store, as cheap as a plain increment. Read, on any
// thread, sees each figure as of some recent moment. A listener with
// several serving threads keeps one tally per thread and sums them.
#ifndef RKV_COMMON_FABRIC_SERVED_TALLY_H_
#define RKV_COMMON_FABRIC_SERVED_TALLY_H_

#include <atomic>
#include <cstdint>

#include "common/fabric/types.h"

namespace rkv::fabric {

class ServedTally {
 public:
  // A queue pair was accepted (handshake done), or one accepted closed.
  // Release, so that a reader that sees a close sees its accept too, and
  // the connections open never count below zero.
  void Accepted() { Bump(accepted_, 1, std::memory_order_release); }
  void Closed() { Bump(closed_, 1, std::memory_order_release); }

  // A request executed successfully; `length` is a READ's or WRITE's.
  void Served(Opcode op, uint64_t length) {
    switch (op) {
      case Opcode::kRead:
        Bump(reads_, 1);
        Bump(read_bytes_, length);
        break;
      case Opcode::kWrite:
        Bump(writes_, 1);
        Bump(write_bytes_, length);
        break;
      case Opcode::kCas64:
        Bump(compare_and_swaps_, 1);
        break;
      case Opcode::kFaa64:
        Bump(fetch_and_adds_, 1);
        break;
    }
  }

  ListenerCounters Read() const {
    ListenerCounters c;
    const uint64_t closed = closed_.load(std::memory_order_acquire);
    c.connections_accepted = accepted_.load(std::memory_order_acquire);
    c.connections = c.connections_accepted - closed;
    c.reads = reads_.load(std::memory_order_relaxed);
    c.writes = writes_.load(std::memory_order_relaxed);
    c.compare_and_swaps = compare_and_swaps_.load(std::memory_order_relaxed);
    c.fetch_and_adds = fetch_and_adds_.load(std::memory_order_relaxed);
    c.read_bytes = read_bytes_.load(std::memory_order_relaxed);
    c.write_bytes = write_bytes_.load(std::memory_order_relaxed);
    return c;
  }

 private:
  // Not fetch_add: the one writer needs no atomic read-modify-write.
  static void Bump(std::atomic<uint64_t>& a, uint64_t n,
                   std::memory_order order = std::memory_order_relaxed) {
    a.store(a.load(std::memory_order_relaxed) + n, order);
  }

  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> closed_{0};
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> compare_and_swaps_{0};
  std::atomic<uint64_t> fetch_and_adds_{0};
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<uint64_t> write_bytes_{0};
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SERVED_TALLY_H_
