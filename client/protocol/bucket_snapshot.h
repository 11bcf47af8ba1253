// What an operation knows of its key's place in the index: the slots of
// the key's two combined buckets as one read saw them, and, for each slot
// whose fingerprint matches, whether its block holds the key. A block is
// read once and what it held is remembered while the knowledge is younger
// than half the grace period (a block is not reused within the grace
// period of being unlinked, so until then it still holds what it held).
//
// A snapshot is complete when every candidate block was read intact and
// within the grace period of the bucket read; only then may the operation
// decide from it. A NotFound from a partial snapshot could be wrong.
#ifndef RKV_CLIENT_PROTOCOL_BUCKET_SNAPSHOT_H_
#define RKV_CLIENT_PROTOCOL_BUCKET_SNAPSHOT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/protocol/op_rounds.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"
#include "common/layout/region_format.h"

namespace rkv::client_internal {

class BucketSnapshot {
 public:
  struct SlotSeen {
    uint64_t offset;  // Region offset of the slot.
    uint64_t word;
  };

  // `key` must outlive the snapshot. With `keep_values` the key's values
  // are kept as its blocks are read (GET). nullopt when scratch memory is
  // short.
  static std::optional<BucketSnapshot> Create(Session& session, absl::string_view key,
                                              bool keep_values);

  const layout::KeyPlacement& placement() const { return place_; }
  // Region offset of combined bucket `b` (0 or 1, in address order).
  uint64_t bucket_offset(int b) const { return bucket_offset_[b]; }

  // A block this operation wrote names the key without being read; `word`
  // is its committed slot word.
  void SetOwnBlock(uint64_t word) { own_block_ = layout::CommittedOf(word); }

  // Adds the READs of both combined buckets to the round.
  void PostRead(OpRounds& rounds);
  // After the round that read the buckets: takes their slots and adds a
  // READ of every candidate block not yet known. True when it added any
  // (call OnBlocks when they completed), false when the snapshot is
  // complete. Unavailable when scratch memory ran out for a block.
  absl::StatusOr<bool> OnBuckets(OpRounds& rounds);
  // After the block reads: false when the snapshot cannot be trusted (a
  // block torn, or read too late to be sure it was not reused): Forget,
  // then read again.
  bool OnBlocks();
  // Drops what was learnt of blocks.
  void Forget();

  // The slots last read, each once (the two buckets may share one).
  const std::vector<SlotSeen>& slots() const { return slots_; }
  // When the slots were read, at the oldest.
  absl::Time observed_at() const { return observed_at_; }
  // Whether the block `word` names holds the key, as far as is known.
  bool KeyMatches(uint64_t word) const;
  // The first committed slot whose block holds the key; nullptr if none.
  const SlotSeen* FindCommitted() const;
  // The same for an intent (replicated regions).
  const SlotSeen* FindIntent() const;
  // The key's value in the block `word` names (with keep_values).
  std::string ValueOf(uint64_t word) const;

 private:
  // Combined bucket images, as the last read left them.
  struct Buckets {
    uint8_t bytes[2][layout::kCombinedBucketBytes];
  };
  // What a block read showed: whether it holds the key, and with
  // keep_values the key's value.
  struct KnownBlock {
    uint64_t id;  // The block's identity: its committed slot word.
    bool holds_key;
    std::string value;
  };
  // A block being read, for the slot that named it.
  struct Candidate {
    SlotSeen slot;
    ScratchBuffer block;
  };

  BucketSnapshot(Session& session, absl::string_view key, bool keep_values, ScratchBuffer buckets);

  // What was learnt of block `id`; nullptr if nothing.
  const KnownBlock* FindKnown(uint64_t id) const;

  Session* s_;
  absl::string_view key_;
  bool keep_values_;
  layout::KeyPlacement place_;
  uint64_t bucket_offset_[2];
  ScratchBuffer buckets_;
  uint64_t own_block_ = 0;

  std::vector<SlotSeen> slots_;
  absl::Time observed_at_;
  // Blocks learnt by reading them, valid while younger than half the
  // grace period. Two buckets name few blocks of the key's fingerprint, so
  // a short array searched in order serves, without allocating for them.
  absl::InlinedVector<KnownBlock, 4> known_;
  absl::Time known_since_;
  std::vector<Candidate> candidates_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_BUCKET_SNAPSHOT_H_
