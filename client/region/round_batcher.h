// Many operations' rounds under one doorbell per copy of the region. A Poll
// gathers every round that is ready into a batch per copy and posts each
// batch at once, so that operations in flight together share round trips,
// the unit their costs and budgets count.
//
// Within a batch, a round's share signals only its last request: a queue
// pair completes in order, so that completion speaks for the share, and a
// round waits for one completion per copy it reaches. Every request's
// wr_id names its operation's slot, which routes the completion back.
#ifndef RKV_CLIENT_REGION_ROUND_BATCHER_H_
#define RKV_CLIENT_REGION_ROUND_BATCHER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "client/protocol/op_rounds.h"
#include "client/region/region_copies.h"
#include "common/fabric/types.h"

namespace rkv::client_internal {

class RoundBatcher {
 public:
  explicit RoundBatcher(int copies) : batches_(copies) {}

  // Moves `round`'s requests into the batches as those of slot `slot`;
  // returns how many completions the round waits for.
  uint32_t Append(size_t slot, OpRounds& round);
  // Posts each copy's batch under one doorbell. The batches are empty
  // afterwards, posted or not. Inline: every turn of the event loop posts.
  absl::Status Post(RegionCopies& copies) {
    absl::Status posted;
    for (size_t r = 0; r < batches_.size(); ++r) {
      if (!batches_[r].empty() && posted.ok()) {
        posted = copies.qp(static_cast<int>(r)).Post(batches_[r]);
      }
      batches_[r].clear();
    }
    return posted;
  }

  // The slot whose round `c` completes.
  static size_t SlotOf(const fabric::Completion& c) { return c.wr_id >> 32; }

 private:
  // By copy; kept between posts for their capacity.
  std::vector<std::vector<fabric::WorkRequest>> batches_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_REGION_ROUND_BATCHER_H_
