#include "client/protocol/cached_read.h"

#include "common/layout/region_format.h"

namespace rkv::client_internal {

bool CachedRead::Post(OpRounds& rounds, const CachedSlot& cached) {
  const layout::Slot slot = layout::Slot::Decode(cached.word);
  const uint64_t bytes = layout::ClassBytes(slot.size_class);
  word_ = ScratchBuffer::AllocateFor<uint64_t>(s_->scratch());
  block_ = ScratchBuffer::Allocate(s_->scratch(), bytes);
  if (!word_ || !block_) {
    word_.Reset();
    block_.Reset();
    return false;
  }
  slot_offset_ = cached.slot_offset;
  expected_ = cached.word;
  rounds.AddRead(slot_offset_, word_.data(), 8);
  rounds.AddRead(slot.offset, block_.data(), static_cast<uint32_t>(bytes));
  return true;
}

std::optional<std::string> CachedRead::OnRound(const OpRounds& rounds) {
  std::optional<std::string> value;
  if (*word_.As<uint64_t>() == expected_ &&
      s_->Now() - rounds.posted_at() <= s_->options().grace_period) {
    absl::StatusOr<layout::BlockView> block = layout::DecodeBlock(
        absl::string_view(reinterpret_cast<const char*>(block_.data()), block_.size()),
        s_->broken().skip_block_checksum ? layout::BlockCheck::kLengthsOnly
                                         : layout::BlockCheck::kChecksum);
    if (block.ok() && block->key == key_) value = std::string(block->value);
  }
  word_.Reset();
  block_.Reset();
  if (value.has_value()) {
    s_->cache().Put(key_, s_->region_id(), {slot_offset_, expected_, rounds.posted_at()});
  } else {
    s_->cache().Erase(key_);
  }
  return value;
}

}  // namespace rkv::client_internal
