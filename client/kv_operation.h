// One GET, PUT, INSERT or DELETE as an explicit state machine over rounds of
// one-sided requests. The client posts each round's requests (sharing the
// doorbell with other operations' rounds) and calls Step() when the round
// has completed, until the operation finishes.
//
// The protocol (docs/ARCHITECTURE.md has the argument for it):
// - A key lives in at most one committed slot among its two combined
//   buckets. Readers trust only committed slots.
// - A new key is claimed with CAS(0 -> pending) and the buckets are re-read
//   in the same doorbell (requests of a queue pair execute in order), then
//   committed with CAS(pending -> committed). Concurrent claims of one key
//   are settled by slot address: the highest claim kills the others
//   (CAS pending -> 0) before committing; a lower one helps the highest
//   commit and withdraws. So exactly one slot survives and a value is never
//   visible before its insert is decided.
// - Updates and deletes CAS the committed slot from the value they saw.
// - Blocks are written before any slot points to them and never changed
//   while one does; a replaced block is reused only after the grace period.
#ifndef RKV_CLIENT_KV_OPERATION_H_
#define RKV_CLIENT_KV_OPERATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "client/session.h"
#include "common/fabric/types.h"
#include "common/layout/region_format.h"

namespace rkv::client_internal {

class KvOperation {
 public:
  // The most requests one round holds: a kill round's CASes (at most 29
  // kills and a withdrawal), or one READ per block named by the two
  // combined buckets' slots (28).
  static constexpr uint32_t kMaxRoundRequests = 32;

  KvOperation(Session& session, OpType type, std::string key, std::string value);
  ~KvOperation();
  KvOperation(const KvOperation&) = delete;
  KvOperation& operator=(const KvOperation&) = delete;

  // Starts the operation, or continues it after its round completed.
  void Step();
  // Start() could not get scratch memory; try again later.
  bool blocked() const { return blocked_; }
  bool finished() const { return finished_; }
  OpType type() const { return type_; }
  const absl::Status& status() const { return status_; }
  std::string& result() { return result_; }

  // The requests of the next round; the client posts and clears them.
  std::vector<fabric::WorkRequest>& round() { return round_; }
  void OnPosted(absl::Time at);

  const OpCosts& costs() const { return costs_; }
  // A CAS of this operation was posted: failed now, its outcome is unknown.
  bool posted_cas() const { return posted_cas_; }

  // Ends the operation with `status`, posting nothing more.
  void Finish(absl::Status status);

 private:
  enum class State {
    kStart, kChunk, kPoolHead, kPoolNode, kPoolPop, kBuckets, kBlocks, kClaim, kCommit, kKill,
    kYield, kUpdate, kCachedGet, kCachedCas, kDirectCommit,
  };
  struct SlotSeen {
    uint64_t offset;
    uint64_t word;
  };

  void Start();
  void StartWrite();
  void WriteBlock();  // my_block_ allocated.
  void Restart();
  void ReadBuckets();
  void OnBuckets();
  void OnBlocks();
  void Decide();
  void DecideGet();
  void DecideDelete();
  void DecideWrite();
  void Claim();
  void OnClaim();
  void OnCommit();
  void OnKill();
  void OnUpdate();
  void OnCachedGet();
  void OnCachedCas();
  void OnChunk();
  void ReadPoolHead();
  void OnPoolHead();
  void OnPoolNode();
  void OnPoolPop();
  void RetryPool();

  // Request builders; `local` must lie in scratch memory.
  void AddRead(uint64_t region_offset, void* local, uint32_t len);
  void AddWrite(uint64_t region_offset, const void* local, uint32_t len);
  void AddCas(uint64_t region_offset, uint64_t* result, uint64_t expected, uint64_t desired);
  void AddFaa(uint64_t region_offset, uint64_t* result, uint64_t add);

  bool IsMine(uint64_t word) const {
    return write_ && my_committed_ != 0 && layout::CommittedOf(word) == my_committed_;
  }
  bool KeyMatches(uint64_t word) const;
  void FreeMyBlock();

  Session& s_;
  const OpType type_;
  const std::string key_;
  const std::string value_;
  const bool write_;
  State state_ = State::kStart;
  bool blocked_ = false;
  bool finished_ = false;
  bool posted_cas_ = false;
  absl::Status status_;
  std::string result_;
  OpCosts costs_;
  std::vector<fabric::WorkRequest> round_;
  absl::Time round_posted_at_;

  layout::KeyPlacement place_{};
  uint64_t bucket_offset_[2] = {0, 0};
  uint8_t* fixed_ = nullptr;    // Bucket buffers (256 B), then result words.
  uint64_t* words_ = nullptr;
  uint8_t* block_buf_ = nullptr;  // The block to write, or a cached GET's block.
  std::vector<uint8_t*> read_bufs_;

  // What the last bucket read saw, and when it was posted.
  std::vector<SlotSeen> slots_;
  absl::Time observed_at_;
  // Block identity (committed slot word) -> does it hold our key; learned
  // by reading blocks, valid while younger than the grace period.
  absl::flat_hash_map<uint64_t, bool> known_;
  absl::flat_hash_map<uint64_t, std::string> known_values_;
  absl::Time known_since_;
  std::vector<SlotSeen> candidates_;  // Blocks being read this round.

  // Writes: our block and the slot words that name it.
  uint8_t size_class_ = 0;
  uint64_t my_block_ = 0;  // Region offset; 0 until allocated.
  uint64_t my_committed_ = 0;
  uint64_t my_pending_ = 0;
  bool ever_claimed_ = false;
  uint64_t claimed_slot_ = 0;   // The slot our pending claim holds; 0 if none.
  uint64_t claim_attempt_ = 0;  // The slot the last claim CAS targeted.
  std::vector<uint64_t> claimed_before_;  // Every slot a claim CAS targeted.
  uint64_t chunk_bytes_ = 0;
  uint64_t pool_head_ = 0;  // The free-pool head word the pop expects.
  layout::FreeNode pool_node_;

  // The slot a CAS round targets and what it expects.
  uint64_t target_slot_ = 0;
  uint64_t expected_ = 0;
  std::vector<SlotSeen> kill_;
  SlotSeen winner_{0, 0};
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_KV_OPERATION_H_
