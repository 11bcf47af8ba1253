// The queue pairs a listener holds open for each peer id
// (QueuePairOptions::peer_id), and the ids whose last one has closed since
// someone last asked (Listener::TakeDeparted): how a server learns at once
// that a client process is gone, whose connections its kernel closed when
// it exited. Thread-safe.
#ifndef RKV_COMMON_FABRIC_PEER_DEPARTURES_H_
#define RKV_COMMON_FABRIC_PEER_DEPARTURES_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"

namespace rkv::fabric {

class PeerDepartures {
 public:
  // Departures kept for a taker that does not come (a server without
  // leases never asks): beyond them the oldest are dropped.
  static constexpr size_t kMaxKept = 1 << 16;

  // A queue pair naming `peer_id` was accepted, or one of them closed.
  // Id 0 names no peer and is not counted.
  void Opened(uint64_t peer_id);
  void Closed(uint64_t peer_id);

  // The ids whose last queue pair closed since the last call and that
  // have none open now, oldest first.
  std::vector<uint64_t> Take();

 private:
  std::mutex mu_;
  absl::flat_hash_map<uint64_t, uint32_t> open_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> departed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_PEER_DEPARTURES_H_
