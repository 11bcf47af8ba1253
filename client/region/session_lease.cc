#include "client/region/session_lease.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rkv::client_internal {
namespace {

// Entries a claim tries, from a random one on, before it calls a table full.
constexpr uint32_t kClaimProbes = 64;

}  // namespace

uint64_t SessionLease::NewId(Rng& rng) {
  for (;;) {
    if (const uint64_t id = rng.Next(); id != 0) return id;
  }
}

absl::Status SessionLease::Claim(Session& session, RegionCopies& copies, uint64_t id,
                                 absl::Time now) {
  *this = SessionLease();
  for (int r = 0; r < copies.size(); ++r) {
    if (copies.header(r).session_slots == 0) return absl::OkStatus();  // An older server.
  }
  id_ = id;
  word_ = ScratchBuffer::AllocateFor<uint64_t>(session.scratch());
  if (!word_) return absl::ResourceExhaustedError("scratch memory");
  absl::Duration lease = absl::InfiniteDuration();
  for (int r = 0; r < copies.size(); ++r) {
    if (absl::Status s = ClaimOn(session, copies, r); !s.ok()) {
      Empty(session, copies);
      *this = SessionLease();
      return s;
    }
    copies_ = r + 1;
    lease = std::min(lease, absl::Microseconds(copies.header(r).lease_us));
  }
  lease_ = lease;
  renewed_ = now;  // The server counts the lease from when it sees the entry.
  return absl::OkStatus();
}

absl::Status SessionLease::ClaimOn(Session& session, RegionCopies& copies, int r) {
  const layout::Layout& h = copies.header(r);
  uint64_t* found = word_.As<uint64_t>();
  const uint32_t start = static_cast<uint32_t>(id_ % h.session_slots);
  for (uint32_t k = 0; k < std::min(kClaimProbes, h.session_slots); ++k) {
    const uint32_t slot = (start + k) % h.session_slots;
    const uint64_t owner_addr = h.session_table + layout::SessionOwnerOffset(slot);
    RKV_RETURN_IF_ERROR(copies.RunSync(
        {fabric::WorkRequest::Cas(0, found, session.lkey(), owner_addr, h.session_rkey, 0, id_)},
        r));
    if (*found == 0) {
      entry_[r] = {owner_addr, h.session_rkey};
      return absl::OkStatus();
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("server ", copies.region(r).endpoint.address, " holds no room for another ",
                   "client session (", h.session_slots, " entries; kvserver --session_slots)"));
}

bool SessionLease::MaybeRenew(absl::Time now, OpRounds& rounds, bool often) {
  // A clock that went back (before the last renewal: a test's or the
  // simulation's, never the monotonic clock) renews at once.
  const absl::Duration every = often ? std::min(lease_ / 4, absl::Milliseconds(5)) : lease_ / 4;
  if (!held() || in_flight_ || (now >= renewed_ && now - renewed_ < every)) return false;
  *word_.As<uint64_t>() = ++renewal_;
  for (int r = 0; r < copies_; ++r) {
    rounds.AddWriteTo(entry_[r].owner_addr + 8, entry_[r].rkey, word_.data(), 8, r);
  }
  posted_ = now;
  in_flight_ = true;
  return true;
}

void SessionLease::OnRenewed() {
  in_flight_ = false;
  renewed_ = posted_;
}

void SessionLease::Depart(Session& session, RegionCopies& copies) {
  if (!held() || !copies.connected()) return;
  for (int r = 0; r < copies_; ++r) {
    const layout::Layout& h = copies.header(r);
    // Best effort: a session that cannot count itself cannot hand anything
    // back either.
    (void)copies.RunSync(
        {fabric::WorkRequest::Faa(0, word_.As<uint64_t>(), session.lkey(),
                                  h.session_table + layout::kSessionDeparturesOffset,
                                  h.session_rkey, 1)},
        r);
  }
}

void SessionLease::Release(Session& session, RegionCopies& copies) {
  if (!held()) return;
  Empty(session, copies);
  *this = SessionLease();
}

void SessionLease::Empty(Session& session, RegionCopies& copies) {
  if (!copies.connected()) return;
  *word_.As<uint64_t>() = 0;
  for (int r = 0; r < copies_; ++r) {
    // Best effort: an entry left behind lapses and is fenced.
    (void)copies.RunSync({fabric::WorkRequest::Write(0, word_.data(), 8, session.lkey(),
                                                     entry_[r].owner_addr, entry_[r].rkey)},
                         r);
  }
}

}  // namespace rkv::client_internal
