#include "client/kv_operation.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/outcome.h"

namespace rkv::client_internal {
namespace {

using fabric::WorkRequest;
using layout::Slot;

// Restarts (torn or reused blocks, lost races) before an operation gives up.
constexpr int kMaxRetries = 200;
// Two combined buckets, then result words: [0] CAS, [1..kMaxKills] kills,
// [kFaaWord] the heap-cursor FAA.
constexpr int kResultWords = 32;
constexpr int kFaaWord = kResultWords - 1;
constexpr size_t kMaxKills = kResultWords - 3;  // Plus our own withdrawal.
constexpr uint64_t kFixedScratch = 2 * layout::kCombinedBucketBytes + kResultWords * 8;

absl::StatusOr<layout::BlockView> DecodeRead(const uint8_t* buf, uint64_t bytes,
                                             bool skip_checksum) {
  return layout::DecodeBlock(
      absl::string_view(reinterpret_cast<const char*>(buf), bytes),
      skip_checksum ? layout::BlockCheck::kLengthsOnly : layout::BlockCheck::kChecksum);
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

KvOperation::KvOperation(Session& session, OpType type, std::string key, std::string value)
    : s_(session),
      type_(type),
      key_(std::move(key)),
      value_(std::move(value)),
      write_(type == OpType::kPut || type == OpType::kInsert) {}

KvOperation::~KvOperation() {
  s_.scratch().Free(fixed_);
  s_.scratch().Free(block_buf_);
  for (uint8_t* b : read_bufs_) s_.scratch().Free(b);
}

void KvOperation::OnPosted(absl::Time at) {
  round_posted_at_ = at;
  costs_.round_trips++;
  costs_.requests += round_.size();
  for (const WorkRequest& wr : round_) costs_.bytes += wr.length;
}

void KvOperation::AddRead(uint64_t off, void* local, uint32_t len) {
  round_.push_back(WorkRequest::Read(0, local, len, s_.lkey(), s_.Remote(off), s_.rkey()));
}
void KvOperation::AddWrite(uint64_t off, const void* local, uint32_t len) {
  round_.push_back(WorkRequest::Write(0, local, len, s_.lkey(), s_.Remote(off), s_.rkey()));
}
void KvOperation::AddCas(uint64_t off, uint64_t* result, uint64_t expected, uint64_t desired) {
  posted_cas_ = true;
  round_.push_back(
      WorkRequest::Cas(0, result, s_.lkey(), s_.Remote(off), s_.rkey(), expected, desired));
}
void KvOperation::AddFaa(uint64_t off, uint64_t* result, uint64_t add) {
  round_.push_back(WorkRequest::Faa(0, result, s_.lkey(), s_.Remote(off), s_.rkey(), add));
}

void KvOperation::Finish(absl::Status status) {
  if (absl::IsUnavailable(status) && posted_cas_) status = WithUnknownOutcome(std::move(status));
  status_ = std::move(status);
  finished_ = true;
  round_.clear();
}

void KvOperation::Step() {
  switch (state_) {
    case State::kStart: return Start();
    case State::kChunk: return OnChunk();
    case State::kPoolHead: return OnPoolHead();
    case State::kPoolNode: return OnPoolNode();
    case State::kPoolPop: return OnPoolPop();
    case State::kBuckets: return OnBuckets();
    case State::kBlocks: return OnBlocks();
    case State::kClaim: return OnClaim();
    case State::kCommit: return OnCommit();
    case State::kKill: return OnKill();
    case State::kYield: return ReadBuckets();  // Re-decide from a fresh read.
    case State::kUpdate: return OnUpdate();
    case State::kCachedGet: return OnCachedGet();
    case State::kCachedCas: return OnCachedCas();
    case State::kDirectCommit:
      if (words_[0] == 0) return Finish(absl::OkStatus());
      return ReadBuckets();
  }
}

void KvOperation::Start() {
  if (key_.empty() || key_.size() > layout::kMaxKeyBytes) {
    return Finish(absl::InvalidArgumentError(absl::StrCat(
        "key of ", key_.size(), " bytes; keys are 1 to ", layout::kMaxKeyBytes, " bytes")));
  }
  if (value_.size() > layout::kMaxValueBytes) {
    return Finish(absl::InvalidArgumentError(absl::StrCat(
        "value of ", value_.size(), " bytes; values are at most ", layout::kMaxValueBytes,
        " bytes")));
  }
  if (write_) {
    size_class_ = layout::ClassFor(layout::BlockBytes(key_.size(), value_.size()));
  }
  const uint64_t block_bytes = write_ ? layout::ClassBytes(size_class_) : 0;
  fixed_ = s_.scratch().Allocate(kFixedScratch);
  block_buf_ = block_bytes ? s_.scratch().Allocate(block_bytes) : nullptr;
  if (fixed_ == nullptr || (block_bytes && block_buf_ == nullptr)) {
    s_.scratch().Free(fixed_);
    s_.scratch().Free(block_buf_);
    fixed_ = block_buf_ = nullptr;
    blocked_ = true;
    return;
  }
  blocked_ = false;
  words_ = reinterpret_cast<uint64_t*>(fixed_ + 2 * layout::kCombinedBucketBytes);
  place_ = layout::PlaceKey(key_, s_.layout().groups);
  for (int i = 0; i < 2; ++i) {
    bucket_offset_[i] = layout::CombinedBucketOffset(s_.layout(), place_.group[i], place_.side[i]);
  }
  if (bucket_offset_[0] > bucket_offset_[1]) std::swap(bucket_offset_[0], bucket_offset_[1]);

  const CachedSlot* cached = s_.cache().Find(key_, s_.region_id());
  const bool fresh = cached && s_.Now() - cached->seen_at < s_.options().grace_period / 2;
  switch (type_) {
    case OpType::kGet:
      if (cached != nullptr) {
        const uint64_t bytes = layout::ClassBytes(Slot::Decode(cached->word).size_class);
        uint8_t* buf = s_.scratch().Allocate(bytes);
        if (buf != nullptr) {
          read_bufs_.push_back(buf);
          target_slot_ = cached->slot_offset;
          expected_ = cached->word;
          // The slot, then its block: one doorbell, executed in order.
          AddRead(cached->slot_offset, &words_[0], 8);
          AddRead(Slot::Decode(cached->word).offset, buf, static_cast<uint32_t>(bytes));
          state_ = State::kCachedGet;
          return;
        }
      }
      return ReadBuckets();
    case OpType::kDelete:
      if (fresh) {
        target_slot_ = cached->slot_offset;
        expected_ = cached->word;
        AddCas(target_slot_, &words_[0], expected_, 0);
        state_ = State::kCachedCas;
        return;
      }
      return ReadBuckets();
    case OpType::kPut:
    case OpType::kInsert:
      layout::EncodeBlockInto(key_, value_, block_buf_);
      return StartWrite();
  }
}

void KvOperation::StartWrite() {
  my_block_ = s_.heap().Allocate(size_class_, s_.Now());
  if (my_block_ == 0) {
    chunk_bytes_ = s_.heap().ChunkRequestBytes(size_class_);
    AddFaa(layout::HeaderOffsets::kHeapCursor, &words_[kFaaWord], chunk_bytes_);
    state_ = State::kChunk;
    return;
  }
  WriteBlock();
}

void KvOperation::WriteBlock() {
  my_committed_ = Slot{place_.fingerprint, size_class_, my_block_, false}.Encode();
  my_pending_ = my_committed_ | 1;
  const uint32_t block_len = static_cast<uint32_t>(layout::ClassBytes(size_class_));
  AddWrite(my_block_, block_buf_, block_len);
  const CachedSlot* cached = s_.cache().Find(key_, s_.region_id());
  if (type_ == OpType::kPut && cached != nullptr &&
      s_.Now() - cached->seen_at < s_.options().grace_period / 2) {
    // The block lands before the CAS that publishes it: same queue pair.
    target_slot_ = cached->slot_offset;
    expected_ = cached->word;
    AddCas(target_slot_, &words_[0], expected_, my_committed_);
    state_ = State::kCachedCas;
    return;
  }
  ReadBuckets();
}

void KvOperation::OnChunk() {
  if (s_.heap().AddChunk(words_[kFaaWord], chunk_bytes_)) return StartWrite();
  // The cursor has run out, but chunks that operations in flight with
  // this one took may still have room.
  my_block_ = s_.heap().Allocate(size_class_, s_.Now());
  if (my_block_ != 0) return WriteBlock();
  ReadPoolHead();
}

// The heap cursor has run out: take a node of blocks other clients freed
// from the region's free pool (read the head, read the node, CAS the head
// past it). The node is read into block_buf_, of the same class.
void KvOperation::ReadPoolHead() {
  AddRead(layout::FreePoolHeadOffset(size_class_), &words_[kFaaWord], 8);
  state_ = State::kPoolHead;
}

void KvOperation::OnPoolHead() {
  const uint64_t head = words_[kFaaWord];
  const layout::FreePoolHead h = layout::FreePoolHead::Decode(head);
  if (h.node == 0) {
    return Finish(absl::ResourceExhaustedError(absl::StrCat(
        "the server's heap is full (", s_.layout().heap_bytes, " bytes, none free of class ",
        size_class_, ")")));
  }
  pool_head_ = head;
  AddRead(h.node, block_buf_, static_cast<uint32_t>(layout::FreeNodeBytes(size_class_)));
  state_ = State::kPoolNode;
}

void KvOperation::OnPoolNode() {
  absl::StatusOr<layout::FreeNode> node = layout::DecodeFreeNode(
      absl::string_view(reinterpret_cast<const char*>(block_buf_),
                        layout::FreeNodeBytes(size_class_)),
      size_class_, s_.layout());
  if (!node.ok()) return RetryPool();  // Popped and reused by someone else meanwhile.
  const layout::FreePoolHead h = layout::FreePoolHead::Decode(pool_head_);
  pool_node_ = *std::move(node);
  pool_node_.blocks.push_back(h.node);  // The node's own block is free too.
  AddCas(layout::FreePoolHeadOffset(size_class_), &words_[kFaaWord], pool_head_,
         layout::FreePoolHead{static_cast<uint16_t>(h.tag + 1), pool_node_.next}.Encode());
  state_ = State::kPoolPop;
}

void KvOperation::OnPoolPop() {
  if (words_[kFaaWord] != pool_head_) return RetryPool();
  s_.heap().AddRecycled(size_class_, pool_node_.blocks);
  pool_node_ = {};
  layout::EncodeBlockInto(key_, value_, block_buf_);
  StartWrite();
}

void KvOperation::RetryPool() {
  if (++costs_.retries > kMaxRetries) {
    return Finish(absl::UnavailableError("too much contention on the server's free pool"));
  }
  ReadPoolHead();
}

void KvOperation::ReadBuckets() {
  for (int i = 0; i < 2; ++i) {
    AddRead(bucket_offset_[i], fixed_ + i * layout::kCombinedBucketBytes,
            layout::kCombinedBucketBytes);
  }
  state_ = State::kBuckets;
}

void KvOperation::Restart() {
  if (++costs_.retries > kMaxRetries) {
    return Finish(absl::UnavailableError(
        absl::StrCat("no consistent view of key after ", kMaxRetries, " retries")));
  }
  known_.clear();
  known_values_.clear();
  ReadBuckets();
}

bool KvOperation::KeyMatches(uint64_t word) const {
  if (IsMine(word)) return true;
  auto it = known_.find(layout::CommittedOf(word));
  return it != known_.end() && it->second;
}

void KvOperation::OnBuckets() {
  // The slots were read at some moment between the round's posting and
  // now: as old as the posting, as new as now. What known_ says of a block
  // holds for a grace period from when it was learnt, so it may be applied
  // to these slots only if even the newest moment they may show is within
  // it: a round the transport retransmitted can execute long after it was
  // posted, and a block may have been reused for another key since.
  observed_at_ = round_posted_at_;
  if (s_.Now() - known_since_ > s_.options().grace_period / 2) {
    known_.clear();
    known_values_.clear();
    known_since_ = observed_at_;
  }
  slots_.clear();
  for (int b = 0; b < 2; ++b) {
    for (uint32_t i = 0; i < layout::kSlotsPerCombinedBucket; ++i) {
      const uint64_t off = layout::SlotOffset(bucket_offset_[b], i);
      if (b == 1 && std::any_of(slots_.begin(), slots_.end(),
                                [&](const SlotSeen& s) { return s.offset == off; })) {
        continue;  // The shared overflow bucket of one group, read twice.
      }
      const uint64_t rel = off - bucket_offset_[b] + b * layout::kCombinedBucketBytes;
      slots_.push_back({off, Load64(fixed_ + rel)});
    }
  }
  // One read per block not yet known. Two slots may name one block (a
  // claim killed, then made again elsewhere with the same block): it is
  // read once, and candidates_[i] is the block read into read_bufs_[i].
  candidates_.clear();
  for (const SlotSeen& s : slots_) {
    if (s.word == 0 || Slot::Decode(s.word).fingerprint != place_.fingerprint) continue;
    const uint64_t id = layout::CommittedOf(s.word);
    if (IsMine(s.word) || known_.contains(id)) continue;
    if (std::any_of(candidates_.begin(), candidates_.end(),
                    [id](const SlotSeen& c) { return layout::CommittedOf(c.word) == id; })) {
      continue;
    }
    const Slot slot = Slot::Decode(s.word);
    const uint64_t bytes = layout::ClassBytes(slot.size_class);
    if (bytes == 0) {
      known_[id] = false;  // A garbage slot: not ours.
      continue;
    }
    uint8_t* buf = s_.scratch().Allocate(bytes);
    if (buf == nullptr) {
      // Not knowing whose the block is, the operation cannot decide: a
      // NotFound here would be a wrong answer.
      for (uint8_t* b : read_bufs_) s_.scratch().Free(b);
      read_bufs_.clear();
      return Finish(absl::UnavailableError(
          "client scratch memory ran out in the middle of the operation; raise scratch_bytes"));
    }
    candidates_.push_back(s);
    read_bufs_.push_back(buf);
    AddRead(slot.offset, buf, static_cast<uint32_t>(bytes));
  }
  if (round_.empty()) return Decide();
  state_ = State::kBlocks;
}

void KvOperation::OnBlocks() {
  const bool late = s_.Now() - observed_at_ > s_.options().grace_period;
  bool torn = false;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    const SlotSeen& c = candidates_[i];
    const uint64_t id = layout::CommittedOf(c.word);
    uint8_t* buf = read_bufs_[i];
    const uint64_t bytes = layout::ClassBytes(Slot::Decode(c.word).size_class);
    absl::StatusOr<layout::BlockView> block =
        DecodeRead(buf, bytes, s_.broken().skip_block_checksum);
    if (!block.ok()) {
      torn = true;
      continue;
    }
    const bool match = block->key == key_;
    known_[id] = match;
    if (match && type_ == OpType::kGet) known_values_[id] = std::string(block->value);
  }
  for (uint8_t* b : read_bufs_) s_.scratch().Free(b);
  read_bufs_.clear();
  // A block read that outlasted the grace period may show a reused block,
  // and a torn one was changed under us: start over either way.
  if (late || torn) return Restart();
  Decide();
}

void KvOperation::Decide() {
  switch (type_) {
    case OpType::kGet: return DecideGet();
    case OpType::kDelete: return DecideDelete();
    case OpType::kPut:
    case OpType::kInsert: return DecideWrite();
  }
}

void KvOperation::DecideGet() {
  for (const SlotSeen& s : slots_) {
    if (!layout::IsCommitted(s.word) || !KeyMatches(s.word)) continue;
    result_ = known_values_[layout::CommittedOf(s.word)];
    s_.cache().Put(key_, s_.region_id(), {s.offset, s.word, observed_at_});
    return Finish(absl::OkStatus());
  }
  s_.cache().Erase(key_);
  Finish(absl::NotFoundError("key not found"));
}

void KvOperation::DecideDelete() {
  for (const SlotSeen& s : slots_) {
    if (!layout::IsCommitted(s.word) || !KeyMatches(s.word)) continue;
    target_slot_ = s.offset;
    expected_ = s.word;
    AddCas(s.offset, &words_[0], s.word, 0);
    state_ = State::kUpdate;
    return;
  }
  s_.cache().Erase(key_);
  Finish(absl::NotFoundError("key not found"));
}

void KvOperation::DecideWrite() {
  // First, what became of our own claim, if we hold one.
  if (claimed_slot_ != 0) {
    uint64_t word = 0;
    for (const SlotSeen& s : slots_) {
      if (s.offset == claimed_slot_) word = s.word;
    }
    if (word == layout::KilledOf(my_pending_)) {
      // A rival won. Clear the marker (only we may), then decide afresh.
      AddCas(claimed_slot_, &words_[0], word, 0);
      claimed_slot_ = 0;
      state_ = State::kYield;
      return;
    }
    if (word != my_pending_) {
      // Neither pending nor killed: a rival committed our claim, and others
      // may have changed the slot since. Our write took effect then.
      return Finish(absl::OkStatus());
    }
  }
  const SlotSeen* committed = nullptr;
  const SlotSeen* mine = nullptr;
  std::vector<const SlotSeen*> others;
  for (const SlotSeen& s : slots_) {
    if (s.word == 0 || layout::IsKilled(s.word) || !KeyMatches(s.word)) continue;
    if (s.offset == claimed_slot_) {
      mine = &s;
    } else if (layout::IsCommitted(s.word)) {
      committed = &s;
    } else {
      others.push_back(&s);
    }
  }
  if (committed != nullptr) {
    if (mine != nullptr) {
      // The key was committed elsewhere: withdraw our claim first.
      kill_.assign(1, *mine);
      AddCas(mine->offset, &words_[1], my_pending_, 0);
      state_ = State::kKill;
      winner_ = {0, 0};
      return;
    }
    if (type_ == OpType::kInsert) {
      s_.cache().Put(key_, s_.region_id(), {committed->offset, committed->word, observed_at_});
      FreeMyBlock();
      return Finish(absl::AlreadyExistsError("key already exists"));
    }
    target_slot_ = committed->offset;
    expected_ = committed->word;
    AddCas(committed->offset, &words_[0], committed->word, my_committed_);
    state_ = State::kUpdate;
    return;
  }
  if (mine == nullptr) return Claim();
  // Concurrent claims of our key: the highest slot wins. Whoever acts
  // first kills every other claim it saw (and, if not the winner, withdraws
  // its own), and only when all of that succeeded commits the winner. A
  // claim made after our re-read sees the winner, so exactly one commits.
  winner_ = *mine;
  for (const SlotSeen* o : others) {
    if (o->offset > winner_.offset) winner_ = *o;
  }
  kill_.clear();
  for (const SlotSeen* o : others) {
    if (o->offset != winner_.offset && kill_.size() < kMaxKills) kill_.push_back(*o);
  }
  if (winner_.offset != mine->offset) kill_.push_back(*mine);
  for (size_t i = 0; i < kill_.size(); ++i) {
    // Rivals are marked killed; our own claim is simply withdrawn.
    const bool own = kill_[i].offset == claimed_slot_;
    AddCas(kill_[i].offset, &words_[i + 1], kill_[i].word,
           own ? 0 : layout::KilledOf(kill_[i].word));
  }
  if (kill_.empty()) return OnKill();
  state_ = State::kKill;
}

void KvOperation::Claim() {
  // The emptier combined bucket; in it a random free slot of the key's own
  // main bucket if there is one, so that the overflow bucket, shared with
  // the neighbouring main bucket, is left for when it is needed.
  const SlotSeen* best = nullptr;
  int best_free = 0;
  for (int b = 0; b < 2; ++b) {
    std::vector<const SlotSeen*> free, free_main;
    for (const SlotSeen& s : slots_) {
      // Never a slot this operation claimed before: the same slot with the
      // same block is the same word, and a rival's CAS decided on the old
      // claim would take the new one for it (ABA).
      if (std::find(claimed_before_.begin(), claimed_before_.end(), s.offset) !=
          claimed_before_.end()) {
        continue;
      }
      if (s.word == 0 && s.offset >= bucket_offset_[b] &&
          s.offset < bucket_offset_[b] + layout::kCombinedBucketBytes) {
        free.push_back(&s);
        if (!layout::IsOverflowSlot(s_.layout(), s.offset)) free_main.push_back(&s);
      }
    }
    if (static_cast<int>(free.size()) > best_free) {
      best_free = static_cast<int>(free.size());
      const auto& pool = free_main.empty() ? free : free_main;
      best = pool[s_.rng().Uniform(pool.size())];
    }
  }
  if (best == nullptr) {
    FreeMyBlock();
    return Finish(absl::ResourceExhaustedError(
        "index full: both candidate buckets of the key have no free slot it may claim"));
  }
  target_slot_ = best->offset;
  ever_claimed_ = true;
  claim_attempt_ = best->offset;
  claimed_before_.push_back(best->offset);
  if (s_.broken().skip_conflict_resolution) {
    AddCas(best->offset, &words_[0], 0, my_committed_);
    state_ = State::kDirectCommit;
    return;
  }
  AddCas(best->offset, &words_[0], 0, my_pending_);
  ReadBuckets();  // Same doorbell, after the CAS: sees our claim and rivals'.
  state_ = State::kClaim;
}

void KvOperation::OnClaim() {
  if (words_[0] == 0) claimed_slot_ = claim_attempt_;  // Otherwise a rival took the slot.
  OnBuckets();
}

void KvOperation::OnCommit() {
  if (words_[0] == my_pending_ || words_[0] == my_committed_) {
    s_.cache().Put(key_, s_.region_id(), {claimed_slot_, my_committed_, round_posted_at_});
    return Finish(absl::OkStatus());
  }
  ReadBuckets();  // Killed by a higher claim: the re-read tells us how.
}

void KvOperation::OnKill() {
  bool all_done = true;
  for (size_t i = 0; i < kill_.size(); ++i) {
    const bool done = words_[i + 1] == kill_[i].word;
    if (done && kill_[i].offset == claimed_slot_) claimed_slot_ = 0;  // Withdrawn.
    all_done &= done;
  }
  if (!all_done) return ReadBuckets();  // A rival moved first.
  if (winner_.offset == 0) return ReadBuckets();  // We only withdrew.
  AddCas(winner_.offset, &words_[0], winner_.word, layout::CommittedOf(winner_.word));
  // Our own claim commits; a rival's, and we re-read to find it committed.
  state_ = winner_.offset == claimed_slot_ ? State::kCommit : State::kYield;
}

void KvOperation::OnUpdate() {
  if (words_[0] != expected_) {
    s_.cache().Erase(key_);
    if (++costs_.retries > kMaxRetries) {
      return Finish(absl::UnavailableError("too much contention on the key"));
    }
    return ReadBuckets();
  }
  const Slot old = Slot::Decode(expected_);
  s_.heap().Free(old.offset, old.size_class, s_.Now());
  if (type_ == OpType::kDelete) {
    s_.cache().Erase(key_);
  } else {
    s_.cache().Put(key_, s_.region_id(), {target_slot_, my_committed_, round_posted_at_});
  }
  Finish(absl::OkStatus());
}

void KvOperation::OnCachedGet() {
  uint8_t* buf = read_bufs_.empty() ? nullptr : read_bufs_[0];
  const uint64_t bytes = layout::ClassBytes(Slot::Decode(expected_).size_class);
  if (words_[0] == expected_ && buf != nullptr &&
      s_.Now() - round_posted_at_ <= s_.options().grace_period) {
    absl::StatusOr<layout::BlockView> block =
        DecodeRead(buf, bytes, s_.broken().skip_block_checksum);
    if (block.ok() && block->key == key_) {
      result_ = std::string(block->value);
      s_.cache().Put(key_, s_.region_id(), {target_slot_, expected_, round_posted_at_});
      return Finish(absl::OkStatus());
    }
  }
  for (uint8_t* b : read_bufs_) s_.scratch().Free(b);
  read_bufs_.clear();
  s_.cache().Erase(key_);
  ReadBuckets();
}

void KvOperation::OnCachedCas() {
  if (words_[0] == expected_) return OnUpdate();
  s_.cache().Erase(key_);
  ReadBuckets();  // For a PUT the block is written already; it stays ours.
}

void KvOperation::FreeMyBlock() {
  if (my_block_ == 0) return;
  // A block that sat in a claimed slot may still be named by a rival's
  // stale CAS: it waits out the grace period like any other.
  if (ever_claimed_) {
    s_.heap().Free(my_block_, size_class_, s_.Now());
  } else {
    s_.heap().FreeUnpublished(my_block_, size_class_);
  }
  my_block_ = 0;
}

}  // namespace rkv::client_internal
