// The copies of the region a session reaches — one region, or a primary and
// its mirrors — and the session's queue pair to each. The queue pairs come
// and go together: a round may reach every copy, so a session is connected
// to all of them or to none, and it reconnects from scratch after any
// failure (a queue pair in the error state only flushes). The counters of
// the queue pairs a reconnect replaced are kept, so that a session's
// connection counters cover its whole life.
//
// Besides the event loop's posts, the copies run the few blocking round
// trips outside it: reading the region's header when the session opens,
// and handing freed blocks back when it closes.
#ifndef RKV_CLIENT_REGION_REGION_COPIES_H_
#define RKV_CLIENT_REGION_REGION_COPIES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/session/client_resources.h"
#include "common/fabric/fabric.h"
#include "common/fabric/types.h"
#include "common/layout/region_format.h"

namespace rkv::client_internal {

class RegionCopies {
 public:
  // `resources` must outlive the copies: its fabric connects their queue
  // pairs, and its scratch memory is where their requests land.
  RegionCopies(const std::vector<fabric::RemoteRegion>& regions, ClientResources& resources);

  int size() const { return static_cast<int>(copies_.size()); }
  const fabric::RemoteRegion& region(int r) const { return copies_[r].region; }
  // The remote address of a region offset in copy `r`.
  uint64_t Remote(int r, uint64_t offset) const { return copies_[r].region.base + offset; }
  uint32_t rkey(int r) const { return copies_[r].region.rkey; }

  bool connected() const { return !copies_.empty() && copies_[0].qp != nullptr; }
  // Connects a queue pair to every copy, each deep enough for
  // `max_outstanding` operations to post a full round at once, for the
  // session `peer_id` (0: none); on failure none is connected.
  absl::Status Connect(uint32_t max_outstanding, uint64_t peer_id);
  // Closes every queue pair.
  void Disconnect();
  // Only while connected.
  fabric::QueuePair& qp(int r) { return *copies_[r].qp; }
  // Doorbells here count shared rounds once.
  fabric::QueuePairCounters counters() const;

  // Reads every copy's header; they are mirrors, so every one must give
  // the primary's geometry.
  absl::StatusOr<layout::Layout> ReadLayout();
  // Copy `r`'s header as ReadLayout read it: its own session table.
  const layout::Layout& header(int r) const { return copies_[r].header; }
  // Posts `wrs` (the last one signaled) to copy `r`'s queue pair and waits
  // for their completion.
  absl::Status RunSync(std::vector<fabric::WorkRequest> wrs, int r = 0);

 private:
  struct Copy {
    fabric::RemoteRegion region;
    std::unique_ptr<fabric::QueuePair> qp;
    layout::Layout header;
  };

  absl::StatusOr<layout::Layout> ReadHeader(int r);

  ClientResources& resources_;
  std::vector<Copy> copies_;                 // The primary first.
  fabric::QueuePairCounters past_counters_;  // Of queue pairs closed.
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_REGION_REGION_COPIES_H_
