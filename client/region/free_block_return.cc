#include "client/region/free_block_return.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/protocol/free_pool_push.h"
#include "client/protocol/op_rounds.h"
#include "common/layout/region_format.h"
#include "common/status.h"

namespace rkv::client_internal {
namespace {

// Pushes `blocks` a node at a time, each push's rounds run to completion.
absl::Status PushFreeBlocks(Session& session, RegionCopies& copies, uint8_t size_class,
                            const std::vector<uint64_t>& blocks) {
  OpRounds rounds(session);
  uint64_t head = 0;
  const size_t per_push = FreePoolPush::MaxBlocks(size_class);
  for (size_t i = 0; i < blocks.size(); i += per_push) {
    std::optional<FreePoolPush> push = FreePoolPush::Create(
        session, size_class,
        absl::MakeConstSpan(blocks).subspan(i, std::min(per_push, blocks.size() - i)), head);
    if (!push) return absl::ResourceExhaustedError("scratch memory");
    rounds.Reset();
    push->Start(rounds);
    for (bool done = false; !done;) {
      RKV_RETURN_IF_ERROR(copies.RunSync(rounds.requests()));
      rounds.Clear();
      RKV_ASSIGN_OR_RETURN(done, push->OnRound(rounds));
    }
    head = push->head();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReturnFreeBlocks(Session& session, RegionCopies& copies, bool real_clock) {
  HeapAllocator& heap = session.heap();
  std::array<std::vector<uint64_t>, 256> blocks;
  heap.TakeFree(session.Now(), &blocks);
  if (const absl::Time at = heap.AllReusableAt(); real_clock && at > session.Now()) {
    absl::SleepFor(std::min(at - session.Now(), session.options().grace_period));
    heap.TakeFree(session.Now(), &blocks);
  }
  for (int c = 1; c < 256; ++c) {
    if (!blocks[c].empty()) {
      RKV_RETURN_IF_ERROR(PushFreeBlocks(session, copies, static_cast<uint8_t>(c), blocks[c]));
    }
  }
  return absl::OkStatus();
}

}  // namespace rkv::client_internal
