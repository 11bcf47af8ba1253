// The leases of one region's clients (common/layout/region_format.h,
// "Client sessions"): the session table, registered with the fabric beside
// the region, and the check that fences every session whose lease lapsed
// or whose connections all closed, so that a client the server gave up on —
// crashed, cut off, or paused past its lease — can never again write the
// region.
#ifndef RKV_SERVER_KVSERVER_SESSION_LEASES_H_
#define RKV_SERVER_KVSERVER_SESSION_LEASES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/fabric/fabric.h"
#include "common/layout/region_format.h"

namespace rkv::server {

class SessionLeases {
 public:
  // `report_words`: room for the heap census's reports (heap_reclaim.h).
  static absl::StatusOr<std::unique_ptr<SessionLeases>> Create(fabric::Fabric& fabric,
                                                               uint32_t slots, absl::Duration lease,
                                                               uint64_t report_words);
  SessionLeases(const SessionLeases&) = delete;
  SessionLeases& operator=(const SessionLeases&) = delete;

  // Where clients find the table (the region header says so).
  uint64_t remote_base() const { return mr_->remote_base(); }
  uint32_t rkey() const { return mr_->rkey(); }
  uint32_t slots() const { return slots_; }
  absl::Duration lease() const { return lease_; }

  // Looks at every entry. A new owner, or a renewal seen to change, starts
  // the entry's lease anew at `now`; an owner whose lease has run out, or
  // whose queue pairs here all closed (Listener::TakeDeparted), is fenced
  // on `listener` and its entry emptied. Returns the ids fenced.
  // Called every eighth of a lease: how late a lapse is noticed. A call
  // more than a quarter lease after the last starts every lease anew: the
  // renewals of that time were not watched.
  std::vector<uint64_t> Check(absl::Time now, fabric::Listener& listener);

  // As of the last Check: the sessions holding a lease, and the ones
  // fenced since the table was made.
  uint32_t live() const { return live_.load(std::memory_order_relaxed); }
  uint64_t fenced() const { return fenced_.load(std::memory_order_relaxed); }

  // The heap census's view of the table (region_format.h, "The heap
  // census"), read as clients write it.
  uint64_t owner(uint32_t slot) const { return Load(layout::SessionOwnerOffset(slot)); }
  uint64_t ack(uint32_t slot) const { return Load(layout::SessionAckOffset(slot)); }
  // Starts a round's phase; the holdings phase empties the report area.
  void SetRound(uint64_t round_word);
  uint64_t report_cursor() const { return Load(layout::kSessionReportCursorOffset); }
  uint64_t departures() const { return Load(layout::kSessionDeparturesOffset); }
  uint64_t report_words() const { return report_words_; }
  // Report word i (below report_cursor() and report_words()).
  uint64_t report(uint64_t i) const { return Load(layout::SessionReportOffset(slots_) + 8 * i); }

  // The table's words, for tests that stage entries. Clients change them
  // concurrently: access them with std::atomic_ref.
  uint64_t* WordsForTesting() const { return words_.get(); }

 private:
  SessionLeases(uint32_t slots, absl::Duration lease, uint64_t report_words);
  uint64_t Load(uint64_t offset) const;

  struct Seen {
    uint64_t owner = 0;
    uint64_t renewal = 0;
    absl::Time since;  // When the renewal was last seen to change.
  };
  const uint32_t slots_;
  const absl::Duration lease_;
  const uint64_t report_words_;
  std::unique_ptr<uint64_t[]> words_;
  std::unique_ptr<fabric::MemoryRegion> mr_;
  std::vector<Seen> seen_;
  absl::Time last_check_ = absl::InfinitePast();
  std::atomic<uint32_t> live_{0};
  std::atomic<uint64_t> fenced_{0};
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_SESSION_LEASES_H_
