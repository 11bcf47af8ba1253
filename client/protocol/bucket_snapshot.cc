#include "client/protocol/bucket_snapshot.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace rkv::client_internal {
namespace {

using layout::Slot;

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

std::optional<BucketSnapshot> BucketSnapshot::Create(Session& session, absl::string_view key,
                                                     bool keep_values) {
  ScratchBuffer buckets = ScratchBuffer::AllocateFor<Buckets>(session.scratch());
  if (!buckets) return std::nullopt;
  return BucketSnapshot(session, key, keep_values, std::move(buckets));
}

BucketSnapshot::BucketSnapshot(Session& session, absl::string_view key, bool keep_values,
                               ScratchBuffer buckets)
    : s_(&session),
      key_(key),
      keep_values_(keep_values),
      place_(layout::PlaceKey(key, session.layout().groups)),
      buckets_(std::move(buckets)) {
  for (int i = 0; i < 2; ++i) {
    bucket_offset_[i] =
        layout::CombinedBucketOffset(session.layout(), place_.group[i], place_.side[i]);
  }
  if (bucket_offset_[0] > bucket_offset_[1]) std::swap(bucket_offset_[0], bucket_offset_[1]);
}

void BucketSnapshot::PostRead(OpRounds& rounds) {
  Buckets& images = *buckets_.As<Buckets>();
  for (int b = 0; b < 2; ++b) {
    rounds.AddRead(bucket_offset_[b], images.bytes[b], layout::kCombinedBucketBytes);
  }
}

void BucketSnapshot::Forget() { known_.clear(); }

const BucketSnapshot::KnownBlock* BucketSnapshot::FindKnown(uint64_t id) const {
  for (const KnownBlock& k : known_) {
    if (k.id == id) return &k;
  }
  return nullptr;
}

bool BucketSnapshot::KeyMatches(uint64_t word) const {
  if (own_block_ != 0 && layout::CommittedOf(word) == own_block_) return true;
  const KnownBlock* known = FindKnown(layout::CommittedOf(word));
  return known != nullptr && known->holds_key;
}

absl::StatusOr<bool> BucketSnapshot::OnBuckets(OpRounds& rounds) {
  // The slots were read at some moment between the round's posting and
  // now: as old as the posting, as new as now. What known_ says of a block
  // holds for a grace period from when it was learnt, so it may be applied
  // to these slots only if even the newest moment they may show is within
  // it: a round the transport retransmitted can execute long after it was
  // posted, and a block may have been reused for another key since.
  observed_at_ = rounds.posted_at();
  if (s_->Now() - known_since_ > s_->options().grace_period / 2) {
    Forget();
    known_since_ = observed_at_;
  }
  const Buckets& images = *buckets_.As<Buckets>();
  slots_.clear();
  for (int b = 0; b < 2; ++b) {
    for (uint32_t i = 0; i < layout::kSlotsPerCombinedBucket; ++i) {
      const uint64_t off = layout::SlotOffset(bucket_offset_[b], i);
      if (b == 1 && std::any_of(slots_.begin(), slots_.end(),
                                [&](const SlotSeen& s) { return s.offset == off; })) {
        continue;  // The shared overflow bucket of one group, read twice.
      }
      slots_.push_back({off, Load64(images.bytes[b] + layout::SlotOffsetInCombinedBucket(i))});
    }
  }
  // One read per block not yet known. Two slots may name one block (a
  // claim killed, then made again elsewhere with the same block): it is
  // read once, for the first slot that names it.
  candidates_.clear();
  for (const SlotSeen& s : slots_) {
    if (s.word == 0 || Slot::Decode(s.word).fingerprint != place_.fingerprint) continue;
    const uint64_t id = layout::CommittedOf(s.word);
    if ((own_block_ != 0 && id == own_block_) || FindKnown(id) != nullptr) continue;
    if (std::any_of(candidates_.begin(), candidates_.end(),
                    [id](const Candidate& c) { return layout::CommittedOf(c.slot.word) == id; })) {
      continue;
    }
    const Slot slot = Slot::Decode(s.word);
    const uint64_t bytes = layout::ClassBytes(slot.size_class);
    if (bytes == 0) {
      known_.push_back({id, false, {}});  // A garbage slot: not ours.
      continue;
    }
    ScratchBuffer block = ScratchBuffer::Allocate(s_->scratch(), bytes);
    if (!block) {
      // Not knowing whose the block is, the operation cannot decide: a
      // NotFound here would be a wrong answer.
      candidates_.clear();
      return absl::UnavailableError(
          "client scratch memory ran out in the middle of the operation; raise scratch_bytes");
    }
    rounds.AddRead(slot.offset, block.data(), static_cast<uint32_t>(bytes));
    candidates_.push_back({s, std::move(block)});
  }
  return !candidates_.empty();
}

bool BucketSnapshot::OnBlocks() {
  const bool late = s_->Now() - observed_at_ > s_->options().grace_period;
  bool torn = false;
  for (const Candidate& c : candidates_) {
    absl::StatusOr<layout::BlockView> block = layout::DecodeBlock(
        absl::string_view(reinterpret_cast<const char*>(c.block.data()), c.block.size()),
        s_->broken().skip_block_checksum ? layout::BlockCheck::kLengthsOnly
                                         : layout::BlockCheck::kChecksum);
    if (!block.ok()) {
      torn = true;
      continue;
    }
    const uint64_t id = layout::CommittedOf(c.slot.word);
    const bool match = block->key == key_;
    if (FindKnown(id) == nullptr) {
      known_.push_back({id, match, match && keep_values_ ? std::string(block->value) : ""});
    }
  }
  candidates_.clear();
  // A block read that outlasted the grace period may show a reused block,
  // and a torn one was changed under us: start over either way.
  return !late && !torn;
}

const BucketSnapshot::SlotSeen* BucketSnapshot::FindCommitted() const {
  for (const SlotSeen& s : slots_) {
    if (layout::IsCommitted(s.word) && KeyMatches(s.word)) return &s;
  }
  return nullptr;
}

const BucketSnapshot::SlotSeen* BucketSnapshot::FindIntent() const {
  for (const SlotSeen& s : slots_) {
    if (layout::IsIntent(s.word) && KeyMatches(s.word)) return &s;
  }
  return nullptr;
}

std::string BucketSnapshot::ValueOf(uint64_t word) const {
  const KnownBlock* known = FindKnown(layout::CommittedOf(word));
  return known != nullptr ? known->value : std::string();
}

}  // namespace rkv::client_internal
