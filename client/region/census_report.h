// A session's part in its servers' heap census (common/layout/region_format.h,
// "The heap census"), by which a server takes back the heap of the
// sessions it fenced while it serves. With each renewal the session reads
// every copy's table header; when a round asks, it reports what it holds —
// or, later in the round, what it took in or freed since — in a completion
// slot of its own, and acks. While a round is under way its renewals come
// every few milliseconds, so that what it tracks meanwhile stays small.
#ifndef RKV_CLIENT_REGION_CENSUS_REPORT_H_
#define RKV_CLIENT_REGION_CENSUS_REPORT_H_

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "client/protocol/op_rounds.h"
#include "client/region/region_copies.h"
#include "client/region/session_lease.h"
#include "client/session/heap_allocator.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"

namespace rkv::client_internal {

class CensusReport {
 public:
  // What operations in flight hold besides the allocator (report words).
  using HeldBlocks = std::function<void(std::vector<uint64_t>*)>;

  // Once `lease` holds its entries, and before anything is taken from the
  // heap: reads each copy's table header (round trips of its own), and
  // when a round is under way tracks `heap` from now on. Nothing to do
  // when the lease is not held (a server of an older build).
  absl::Status Init(Session& session, RegionCopies& copies, const SessionLease& lease,
                    HeapAllocator& heap);

  // Adds a READ of every copy's table header to a renewal's `rounds`.
  void AddHeaderReads(OpRounds& rounds);
  // A round was under way at the last read, or is being answered: the
  // renewals should come often.
  bool busy() const;

  // After a renewal's header reads landed: when a copy's round asks for a
  // report, builds it (what the heap allocator holds, or tracked; and
  // `held`) and adds its first round to `rounds`; true when it did.
  bool MaybeStart(const HeldBlocks& held, OpRounds& rounds);
  // After a round of the report landed: true when the report is done, else
  // adds the next round to `rounds`.
  bool OnRound(OpRounds& rounds);
  // The report in flight is lost with its queue pairs; the server asks
  // again or gives the round up.
  void OnLost() { state_ = State::kIdle; }

 private:
  struct Table {
    uint64_t base = 0;  // Remote address.
    uint32_t rkey = 0;
    uint64_t ack_addr = 0;
    uint64_t report_addr = 0;
    uint64_t acked = 0;  // The last round word acked.
  };
  enum class State { kIdle, kCursor, kWords };
  HeapAllocator* heap_ = nullptr;  // Init's.
  int copies_ = 0;
  std::array<Table, kMaxReplicas> tables_{};
  ScratchBuffer headers_;  // kCensusHeaderBytes per copy, as last read.
  ScratchBuffer words_;    // A piece of the report, and the ack word.
  State state_ = State::kIdle;
  int copy_ = 0;         // The copy being answered.
  uint64_t answer_ = 0;  // The round word it answers.
  std::vector<uint64_t> report_;
  uint64_t sent_ = 0;  // Words of report_ posted (or dropped).
  uint64_t at_ = 0;    // Where in the report area they go (in words).
  // Tracking for a round of a copy (heap.tracking()).
  uint64_t tracked_round_ = 0;
  int tracked_copy_ = 0;
  // Words of what it tracked that a landed report said, and that the
  // report being answered says once it lands.
  size_t reported_ = 0;
  size_t reporting_ = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_REGION_CENSUS_REPORT_H_
