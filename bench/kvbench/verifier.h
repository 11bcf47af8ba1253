// --verify: every value names its key, this run's nonce and a version, and
// every read is checked against what this run wrote.
//
// Every change of a key (a put, an insert, a delete) is a version of it; a
// delete's version is the key's absence. A change ends in one of three ways:
//   - acknowledged (OK): it took effect, once, between its start and end;
//   - it changed nothing: an insert answered AlreadyExists, a delete
//     answered NotFound, or a failure that carries no outcome-unknown
//     payload (client/protocol/outcome.h; rkv adds it to every failure after a CAS
//     went out, kvbench's other drivers to every failed write);
//   - its outcome is unknown (the payload): it took effect once at some
//     moment after it started, or never, and that moment may come after
//     its call returned and after later changes were acknowledged (a
//     request still on the wire when a connection broke, or a claim it
//     left pending that the next writer of the key commits;
//     docs/RELIABILITY.md). Such a version lingers: it may be found at any
//     later time, and is never surely overwritten.
//
// Changes of one key may overlap (threads, and operations in flight within
// a thread), and overlapping changes may take effect in either order, so a
// read may return an older version than the last one acknowledged. A read
// may return (and a read finding nothing counts as returning an absence):
//   - a lingering version, whenever it is found;
//   - a version that started before the read ended and did not change
//     nothing, unless it was surely overwritten before the read began: some
//     change c started after it had finished, and c was acknowledged before
//     the read started;
//   - before any change of the key by this run was acknowledged, whatever
//     the key held before the run (an earlier run's value, or nothing).
// Anything else is wrong: a version surely overwritten, one that changed
// nothing, one never issued, another key's or run's value, a torn value.
// The verifier tracks, per key, the versions issued, the prefix of versions
// finished, the largest such prefix seen by an acknowledged change when it
// started (the floor), and the lingering versions.
//
// An insert's or a delete's answer is a read of the key too: an insert
// answered OK or a delete answered NotFound found the key absent, an
// insert answered AlreadyExists or a delete answered OK found it present,
// at some moment during the call.
//
// Lingering versions are rare (a few per thousand changes under faults,
// more while a server is down), but a key may collect them for as long as
// the run lasts, so the verifier bounds what it remembers: whether any
// delete of the key lingers (one is enough to explain an absence at any
// time), and the newest kMaxLingering (32) lingering values of the key. A
// read of an older one, forgotten, is reported as wrong, and the message
// says how many were forgotten. (Only hot keys collect that many, and a
// hot key's pending claim is soon committed by its next writer.)
#ifndef RKV_BENCH_KVBENCH_VERIFIER_H_
#define RKV_BENCH_KVBENCH_VERIFIER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

  enum class Change { kPut, kInsert, kDelete };

  struct ReadTicket {
    uint64_t floor;  // Versions up to this one were surely overwritten.
    bool acked;      // Some change of this run was acknowledged: what the key held before is gone.
  };
  struct WriteTicket {
    uint64_t version;   // Versions start at 1.
    uint64_t finished;  // Every version up to this one had finished when the change started.
    Change change = Change::kPut;
    ReadTicket before{0, false};  // Checks an insert's or delete's answer.
  };

  WriteTicket StartWrite(int64_t keynum, Change change = Change::kPut);
  // A put's end: acknowledged, or failed with its outcome unknown.
  void FinishWrite(int64_t keynum, const WriteTicket& ticket, bool acknowledged);
  // Any change's end, given its result. For an insert answered OK or
  // AlreadyExists, or a delete answered OK or NotFound, also checks that
  // the key may have been absent or present, as the answer says: OK or why
  // the answer is wrong. Another error with the outcome-unknown payload
  // leaves the change lingering; one without it changed nothing.
  absl::Status FinishWrite(int64_t keynum, absl::string_view key, const WriteTicket& ticket,
                           const absl::Status& result);
  ReadTicket StartRead(int64_t keynum);
  // Checks what a read returned (NotFound included); OK or why it is wrong.
  absl::Status Check(int64_t keynum, absl::string_view key, const ReadTicket& ticket,
                     const absl::StatusOr<std::string>& result);

 private:
  struct Version {
    uint64_t version;
    bool absent;  // A delete's.
  };
  struct KeyState {
    uint64_t issued = 0;
    uint64_t finished = 0;                 // Versions 1..finished are all done.
    std::vector<uint64_t> finished_above;  // Done, above a gap (few: writes in flight).
    uint64_t floor = 0;
    bool acked = false;
    // The versions above the floor that the key may hold: in flight or
    // acknowledged (few: writes in flight). Changes that changed nothing
    // are dropped, those of unknown outcome move to the lingering ones.
    std::vector<Version> possible;
    // The newest value and absence dropped from `possible` when the floor
    // passed them: still possible for operations that began below it.
    uint64_t passed_value = 0;
    uint64_t passed_absent = 0;
    // Values of puts and inserts of unknown outcome: the newest
    // kMaxLingering, ascending. Older ones are forgotten and counted.
    std::vector<uint64_t> lingering;
    uint32_t forgotten = 0;
    // The newest delete of unknown outcome; 0 if none.
    uint64_t lingering_absent = 0;
  };
  static constexpr size_t kMaxLingering = 32;
  static constexpr int kChunkBits = 16;
  static constexpr int kChunks = 1 << 16;  // 2^32 keys.
  static constexpr int kStripes = 1024;

  // Locks the key's stripe; returns its state.
  KeyState& Lock(int64_t keynum, std::unique_lock<std::mutex>* lock);
  // Whether the key may have been absent (or present), by a version other
  // than `own`, at some moment after an operation holding `ticket` began
  // (up to now, when it ends).
  static bool May(const KeyState& s, const ReadTicket& ticket, bool absent, uint64_t own);
  // For a mismatch's message: how many lingering values the key forgot.
  static std::string Forgotten(const KeyState& s);

  const uint64_t nonce_;
  std::array<std::mutex, kStripes> stripes_;
  // Key states in chunks made on first use, so that addresses never move.
  std::array<std::atomic<KeyState*>, kChunks> chunks_{};
  std::array<std::unique_ptr<KeyState[]>, kChunks> owned_;
};

}  // namespace rkv::bench

#endif  // RKV_BENCH_KVBENCH_VERIFIER_H_
