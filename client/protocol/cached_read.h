// GET's shortcut through the slot cache: the cached slot and the block it
// named, read in one doorbell (a queue pair executes in order). The value
// is trusted only if the slot still holds the word the cache saw, the block
// is intact and holds the key, and the round completed within the grace
// period of its posting (after that the block may have been reused even
// though the slot read still showed it). Otherwise the cache forgets the
// key and the GET takes the long way.
#ifndef RKV_CLIENT_PROTOCOL_CACHED_READ_H_
#define RKV_CLIENT_PROTOCOL_CACHED_READ_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "client/protocol/op_rounds.h"
#include "client/session/scratch_buffer.h"
#include "client/session/session.h"
#include "client/session/slot_cache.h"

namespace rkv::client_internal {

class CachedRead {
 public:
  // `key` must outlive this.
  CachedRead(Session& session, absl::string_view key) : s_(&session), key_(key) {}

  // Adds the reads of `cached`'s slot and block to the round; false when
  // scratch memory lacks room for them (nothing added).
  bool Post(OpRounds& rounds, const CachedSlot& cached);
  // After the round: the key's value, or nullopt when the cache was stale.
  std::optional<std::string> OnRound(const OpRounds& rounds);

 private:
  Session* s_;
  absl::string_view key_;
  uint64_t slot_offset_ = 0;
  uint64_t expected_ = 0;  // The slot word the cache saw.
  ScratchBuffer word_;     // The slot word read.
  ScratchBuffer block_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_CACHED_READ_H_
