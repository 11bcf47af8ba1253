#include "client/region/census_report.h"

#include <algorithm>
#include <cstring>

#include "common/layout/region_format.h"
#include "common/status.h"

namespace rkv::client_internal {
namespace {

// Report words a round writes; the last slot of the buffer is the ack's.
constexpr uint64_t kPieceWords = 1023;

}  // namespace

absl::Status CensusReport::Init(Session& session, RegionCopies& copies, const SessionLease& lease,
                                HeapAllocator& heap) {
  // A session that connects anew (its server may have restarted, with a
  // table afresh) answers every round anew; what it tracks, it keeps.
  const uint64_t tracked_round = tracked_round_;
  const int tracked_copy = tracked_copy_;
  *this = CensusReport();
  if (heap.tracking()) {
    tracked_round_ = tracked_round;
    tracked_copy_ = tracked_copy;
  }
  if (!lease.held()) return absl::OkStatus();
  heap_ = &heap;
  copies_ = lease.copies();
  headers_ = ScratchBuffer::Allocate(session.scratch(), layout::kCensusHeaderBytes * copies_);
  words_ = ScratchBuffer::Allocate(session.scratch(), 8 * (kPieceWords + 1));
  if (!headers_ || !words_) return absl::ResourceExhaustedError("scratch memory");
  for (int r = 0; r < copies_; ++r) {
    const layout::Layout& h = copies.header(r);
    tables_[r] = {.base = h.session_table,
                  .rkey = h.session_rkey,
                  .ack_addr = lease.entry(r).owner_addr + 16,
                  .report_addr = h.session_table + layout::SessionReportOffset(h.session_slots)};
    // After the claim landed: a round that began before it waits for this
    // session's holdings (none yet); one that began after, perhaps not,
    // so everything from now on is tracked.
    uint8_t* header = headers_.data() + layout::kCensusHeaderBytes * r;
    RKV_RETURN_IF_ERROR(
        copies.RunSync({fabric::WorkRequest::Read(0, header, layout::kCensusHeaderBytes,
                                                  session.lkey(), h.session_table, h.session_rkey)},
                       r));
    uint64_t word;
    std::memcpy(&word, header + layout::kSessionRoundOffset, 8);
    if (layout::CensusPhaseOf(word) != layout::kCensusIdle && !heap.tracking()) {
      heap.StartTracking();
      reported_ = 0;
      tracked_round_ = layout::CensusRoundOf(word);
      tracked_copy_ = r;
    }
  }
  return absl::OkStatus();
}

void CensusReport::AddHeaderReads(OpRounds& rounds) {
  for (int r = 0; r < copies_; ++r) {
    rounds.AddReadFrom(tables_[r].base, tables_[r].rkey,
                       headers_.data() + layout::kCensusHeaderBytes * r, layout::kCensusHeaderBytes,
                       r);
  }
}

bool CensusReport::busy() const {
  if (state_ != State::kIdle) return true;
  for (int r = 0; r < copies_; ++r) {
    uint64_t word;
    std::memcpy(&word, headers_.data() + layout::kCensusHeaderBytes * r, 8);
    if (layout::CensusPhaseOf(word) != layout::kCensusIdle) return true;
  }
  return false;
}

bool CensusReport::MaybeStart(const HeldBlocks& held, OpRounds& rounds) {
  if (state_ != State::kIdle || heap_ == nullptr) return false;
  HeapAllocator& heap = *heap_;
  for (int r = 0; r < copies_; ++r) {
    uint64_t word;
    std::memcpy(&word, headers_.data() + layout::kCensusHeaderBytes * r, 8);
    const uint64_t round = layout::CensusRoundOf(word);
    const layout::CensusPhase phase = layout::CensusPhaseOf(word);
    // The round tracked for ended, or was given up.
    if (heap.tracking() && r == tracked_copy_ &&
        (round != tracked_round_ || phase == layout::kCensusIdle)) {
      heap.StopTracking();
    }
    if (phase == layout::kCensusIdle || tables_[r].acked >= word) continue;
    report_.clear();
    reporting_ = reported_;
    if (phase == layout::kCensusHoldings) {
      if (heap.tracking() && (r != tracked_copy_ || round != tracked_round_)) {
        continue;  // Another copy's round first; this one waits (or is given up).
      }
      if (!heap.tracking()) {
        heap.StartTracking();
        reported_ = reporting_ = 0;
      }
      tracked_round_ = round;
      tracked_copy_ = r;
      heap.Holdings(&report_);
      held(&report_);
    } else if (heap.tracking() && r == tracked_copy_ && round == tracked_round_) {
      // What was tracked since the last report that landed (the server may
      // scan anew and ask again); tracking goes on until the round ends.
      reporting_ = heap.Tracked(&report_, reported_);
    }
    // A session that saw the round only once its scan was done has nothing
    // to tell: it reports nothing, and acks.
    copy_ = r;
    answer_ = word;
    sent_ = 0;
    words_.As<uint64_t>()[0] = 0;
    rounds.AddFaaTo(tables_[r].base + layout::kSessionReportCursorOffset, tables_[r].rkey,
                    words_.As<uint64_t>(), report_.size(), r);
    state_ = State::kCursor;
    return true;
  }
  return false;
}

bool CensusReport::OnRound(OpRounds& rounds) {
  if (state_ == State::kCursor) {
    at_ = words_.As<uint64_t>()[0];
    uint64_t capacity;
    std::memcpy(
        &capacity,
        headers_.data() + layout::kCensusHeaderBytes * copy_ + layout::kSessionReportCapacityOffset,
        8);
    // No room: the words are dropped, and the server, which sees the
    // cursor past the area's end, gives the round up.
    if (at_ > capacity || report_.size() > capacity - at_) sent_ = report_.size();
    state_ = State::kWords;
  } else if (sent_ == report_.size()) {  // The ack landed.
    tables_[copy_].acked = answer_;
    reported_ = reporting_;
    state_ = State::kIdle;
    return true;
  }
  // Ordered on the queue pair: the ack lands after every word.
  const Table& t = tables_[copy_];
  uint64_t* words = words_.As<uint64_t>();
  const uint64_t n = std::min<uint64_t>(kPieceWords, report_.size() - sent_);
  if (n > 0) {
    std::memcpy(words, report_.data() + sent_, 8 * n);
    rounds.AddWriteTo(t.report_addr + 8 * (at_ + sent_), t.rkey, words,
                      static_cast<uint32_t>(8 * n), copy_);
    sent_ += n;
  }
  if (sent_ == report_.size()) {
    words[kPieceWords] = answer_;
    rounds.AddWriteTo(t.ack_addr, t.rkey, &words[kPieceWords], 8, copy_);
  }
  return false;
}

}  // namespace rkv::client_internal
