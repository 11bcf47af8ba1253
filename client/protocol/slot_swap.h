// Replaces the word of a key's committed slot by CAS from the word last
// seen there: an update (its block for ours) or a delete (to empty). Slot
// words are unique while younger than the grace period (blocks are not
// reused sooner), so a CAS from a word seen within it cannot suffer ABA.
// When the CAS took effect, the replaced block goes back to the allocator
// to wait out the grace period, and the slot cache learns the new word;
// when it did not, the cache forgets the key.
//
// In a replicated region the CAS installs an intent instead (the word to
// set, or a delete intent naming the word to delete), which the caller
// finishes with ReplicaSync; the replaced block is freed only then
// (FreeReplaced), as the backups name it until they are brought along, and
// the cache learns the new word only then too.
#ifndef RKV_CLIENT_PROTOCOL_SLOT_SWAP_H_
#define RKV_CLIENT_PROTOCOL_SLOT_SWAP_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/string_view.h"
#include "client/protocol/op_rounds.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"

namespace rkv::client_internal {

class SlotSwap {
 public:
  // `key` must outlive this. nullopt when scratch memory is short.
  static std::optional<SlotSwap> Create(Session& session, absl::string_view key);

  // Adds CAS(slot: expected -> desired) to the round (replicated: to the
  // intent of desired, or of deleting expected when desired is 0).
  void Post(OpRounds& rounds, uint64_t slot_offset, uint64_t expected, uint64_t desired);
  // After the round: whether the CAS took effect.
  bool OnRound(const OpRounds& rounds);

  // Replicated regions, after OnRound said yes: the intent installed, the
  // slot and the word it replaced; and, once the intent is finished, the
  // replaced block back to the allocator.
  uint64_t intent() const { return posted_; }
  uint64_t slot_offset() const { return slot_offset_; }
  uint64_t replaced() const { return expected_; }
  void FreeReplaced();

 private:
  SlotSwap(Session& session, absl::string_view key, ScratchBuffer result)
      : s_(&session), key_(key), result_(std::move(result)) {}

  Session* s_;
  absl::string_view key_;
  ScratchBuffer result_;  // What the CAS found.
  uint64_t slot_offset_ = 0;
  uint64_t expected_ = 0;
  uint64_t desired_ = 0;
  uint64_t posted_ = 0;  // What the CAS set: desired_, or its intent.
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_SLOT_SWAP_H_
