#include "server/kvserver/session_leases.h"

#include <atomic>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/layout/region_format.h"
#include "common/logging.h"
#include "common/status.h"

namespace rkv::server {
namespace {

uint64_t LoadWord(uint64_t* word) {
  return std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire);
}

}  // namespace

SessionLeases::SessionLeases(uint32_t slots, absl::Duration lease, uint64_t report_words)
    : slots_(slots),
      lease_(lease),
      report_words_(report_words),
      words_(new uint64_t[layout::SessionTableBytes(slots, report_words) / 8]()),
      seen_(slots) {
  words_[layout::kSessionReportCapacityOffset / 8] = report_words;
}

absl::StatusOr<std::unique_ptr<SessionLeases>> SessionLeases::Create(fabric::Fabric& fabric,
                                                                     uint32_t slots,
                                                                     absl::Duration lease,
                                                                     uint64_t report_words) {
  if (slots == 0 || lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a session table needs slots and a lease");
  }
  std::unique_ptr<SessionLeases> s(new SessionLeases(slots, lease, report_words));
  RKV_ASSIGN_OR_RETURN(
      s->mr_, fabric.RegisterMemory(s->words_.get(), layout::SessionTableBytes(slots, report_words),
                                    fabric::kAllAccess));
  return s;
}

uint64_t SessionLeases::Load(uint64_t offset) const { return LoadWord(&words_[offset / 8]); }

void SessionLeases::SetRound(uint64_t round_word) {
  if (layout::CensusPhaseOf(round_word) == layout::kCensusHoldings) {
    std::atomic_ref<uint64_t>(words_[layout::kSessionReportCursorOffset / 8])
        .store(0, std::memory_order_release);
  }
  std::atomic_ref<uint64_t>(words_[layout::kSessionRoundOffset / 8])
      .store(round_word, std::memory_order_release);
}

std::vector<uint64_t> SessionLeases::Check(absl::Time now, fabric::Listener& listener) {
  std::vector<uint64_t> fenced;
  // A check long after the last (the server was paused, or starved): the
  // renewals of that time were not watched, and may still wait to execute
  // (the soft fabric runs in this process). Every lease starts anew.
  const bool unwatched = last_check_ != absl::InfinitePast() && now - last_check_ > lease_ / 4;
  last_check_ = now;
  // A session whose connections all closed is fenced now, lease or not:
  // its process exited (or the fabric gave up on it), and what it held is
  // nobody's from its fence on, so the heap census need not wait out a
  // lease of a crashed client.
  const std::vector<uint64_t> departed = listener.TakeDeparted();
  const absl::flat_hash_set<uint64_t> gone(departed.begin(), departed.end());
  uint32_t live = 0;
  for (uint32_t i = 0; i < slots_; ++i) {
    uint64_t* owner_word = &words_[layout::SessionOwnerOffset(i) / 8];
    uint64_t* renewal_word = &words_[layout::SessionRenewalOffset(i) / 8];
    const uint64_t owner = LoadWord(owner_word);
    const uint64_t renewal = LoadWord(renewal_word);
    Seen& seen = seen_[i];
    if (owner == 0) {
      seen = {};
      continue;
    }
    const bool left = gone.contains(owner);
    if (!left) {
      if (owner != seen.owner || renewal != seen.renewal || unwatched) {
        seen = {owner, renewal, now};
        ++live;
        continue;
      }
      if (now - seen.since < lease_) {
        ++live;
        continue;
      }
    }
    // Fenced first: once Fence returns, nothing of the session executes
    // here any more, so the entry it might still have renewed is ours.
    if (absl::Status s = listener.Fence(owner); !s.ok()) {
      RKV_LOG(WARNING) << "fencing client session " << owner << ": " << s;
      ++live;
      continue;
    }
    // Emptied only if still the fenced session's: it may have closed and
    // the entry gone to a new session meanwhile.
    uint64_t expected = owner;
    std::atomic_ref<uint64_t>(*owner_word).compare_exchange_strong(expected, 0);
    seen = {};
    fenced.push_back(owner);
    const std::string id = absl::StrCat(absl::Hex(owner, absl::kZeroPad16));
    if (left) {
      RKV_LOG(INFO) << "fenced client session " << id << ": its connections closed";
    } else {
      RKV_LOG(INFO) << "fenced client session " << id << ": no renewal in " << lease_;
    }
  }
  live_.store(live, std::memory_order_relaxed);
  fenced_.fetch_add(fenced.size(), std::memory_order_relaxed);
  return fenced;
}

}  // namespace rkv::server
