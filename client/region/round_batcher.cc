#include "client/region/round_batcher.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "client/protocol/kv_operation.h"
#include "client/session/session.h"
#include "common/logging.h"

namespace rkv::client_internal {

uint32_t RoundBatcher::Append(size_t slot, OpRounds& round) {
  const std::vector<fabric::WorkRequest>& wrs = round.requests();
  RKV_CHECK(wrs.size() <= KvOperation::kMaxRoundRequests) << wrs.size() << " requests";
  size_t last[kMaxReplicas];
  std::fill(std::begin(last), std::end(last), SIZE_MAX);
  for (size_t k = 0; k < wrs.size(); ++k) {
    const int r = round.targets()[k];
    fabric::WorkRequest wr = wrs[k];
    wr.wr_id = (uint64_t{slot} << 32) | k;
    wr.flags &= ~fabric::kSignaled;  // Other flags stay as set.
    last[r] = batches_[r].size();
    batches_[r].push_back(wr);
  }
  uint32_t signaled = 0;
  for (size_t r = 0; r < batches_.size(); ++r) {
    if (last[r] == SIZE_MAX) continue;
    batches_[r][last[r]].flags |= fabric::kSignaled;
    signaled++;
  }
  round.Clear();
  return signaled;
}

}  // namespace rkv::client_internal
