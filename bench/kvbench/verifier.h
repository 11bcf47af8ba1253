// --verify: every value names its key, this run's nonce and a version, and
// every read is checked against what this run wrote.
//
// Writes to one key may overlap (threads, and operations in flight within
// a thread), and overlapping writes may take effect in either order, so a
// read may return an older version than the last one acknowledged. What it
// may not return is a version v that was surely overwritten before the
// read began: one for which some write w started after v had finished, and
// was acknowledged before the read started. The verifier tracks, per key,
// the versions issued, the prefix of versions finished, and the largest
// such prefix seen by an acknowledged write when it started (the floor).
#ifndef RKV_BENCH_KVBENCH_VERIFIER_H_
#define RKV_BENCH_KVBENCH_VERIFIER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rkv::bench {

// A value of `size` bytes (longer if the header needs more): the key, the
// run's nonce and the version, then filler derived from them, so that a
// value torn or mixed with another is detected.
std::string EncodeValue(absl::string_view key, uint64_t nonce, uint64_t version, size_t size);

struct DecodedValue {
  std::string key;
  uint64_t nonce = 0;
  uint64_t version = 0;
};
// DataLoss if `value` is not one EncodeValue made.
absl::StatusOr<DecodedValue> DecodeValue(absl::string_view value);

class Verifier {
 public:
  explicit Verifier(uint64_t nonce) : nonce_(nonce) {}
  uint64_t nonce() const { return nonce_; }

  struct WriteTicket {
    uint64_t version;   // Versions start at 1.
    uint64_t finished;  // Every version up to this one had finished when the write started.
  };
  struct ReadTicket {
    uint64_t floor;  // Versions up to this one were surely overwritten.
    bool written;    // Some write of this run was acknowledged: the key must hold this run's value.
  };

  WriteTicket StartWrite(int64_t keynum);
  void FinishWrite(int64_t keynum, const WriteTicket& ticket, bool acknowledged);
  ReadTicket StartRead(int64_t keynum);
  // Checks what a read returned (NotFound included); OK or why it is wrong.
  absl::Status Check(int64_t keynum, absl::string_view key, const ReadTicket& ticket,
                     const absl::StatusOr<std::string>& result);

 private:
  struct KeyState {
    uint64_t issued = 0;
    uint64_t finished = 0;                 // Versions 1..finished are all done.
    std::vector<uint64_t> finished_above;  // Done, above a gap (few: writes in flight).
    uint64_t floor = 0;
    bool written = false;
  };
  static constexpr int kChunkBits = 16;
  static constexpr int kChunks = 1 << 16;  // 2^32 keys.
  static constexpr int kStripes = 1024;

  // Locks the key's stripe; returns its state.
  KeyState& Lock(int64_t keynum, std::unique_lock<std::mutex>* lock);

  const uint64_t nonce_;
  std::array<std::mutex, kStripes> stripes_;
  // Key states in chunks made on first use, so that addresses never move.
  std::array<std::atomic<KeyState*>, kChunks> chunks_{};
  std::array<std::unique_ptr<KeyState[]>, kChunks> owned_;
};

}  // namespace rkv::bench

#endif  // RKV_BENCH_KVBENCH_VERIFIER_H_
