// The region format: one registered memory region per server, holding a
// header, a RACE-style hash index and a heap of key-value blocks. Clients
// and servers both include this header; nothing else defines the layout.
//
//   [0, 4096)                        RegionHeader
//   [index_offset, +groups * 192)    bucket groups
//   [heap_offset, region end)        heap of 64-byte aligned KV blocks
//
// A bucket group is three 64-byte buckets: main0 | overflow | main1. The
// overflow bucket is shared, so a group holds two *combined buckets* of 128
// contiguous bytes: left = main0+overflow, right = overflow+main1. A key has
// two candidate combined buckets (two independent hashes); a lookup reads
// both. A bucket is an 8-byte header (reserved, zero) and 7 slots.
#ifndef RKV_COMMON_LAYOUT_REGION_FORMAT_H_
#define RKV_COMMON_LAYOUT_REGION_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rkv::layout {

inline constexpr uint64_t kRegionMagic = 0x314E474552564B52ULL;  // "RKVREGN1"
// 2: clients hold leases (the session table). A server stamps its region
// 2 at every start, so that clients of builds before sessions, which read
// only 1, are refused at open rather than left unfenced; this build still
// reads a region of 1 (its server keeps no leases).
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kOldestFormatVersion = 1;
inline constexpr uint64_t kHeaderBytes = 4096;
inline constexpr uint64_t kBucketBytes = 64;
inline constexpr uint64_t kSlotsPerBucket = 7;
inline constexpr uint64_t kGroupBytes = 3 * kBucketBytes;
inline constexpr uint64_t kCombinedBucketBytes = 2 * kBucketBytes;
inline constexpr uint64_t kSlotsPerCombinedBucket = 2 * kSlotsPerBucket;
inline constexpr uint64_t kBlockAlign = 64;

inline constexpr size_t kMaxKeyBytes = 1024;
inline constexpr size_t kMaxValueBytes = 1 << 20;

// Field offsets of the region header. heap_cursor sits on its own cache
// line: clients FAA it to take heap chunks.
struct HeaderOffsets {
  static constexpr uint64_t kMagic = 0;
  static constexpr uint64_t kVersion = 8;
  static constexpr uint64_t kRegionBytes = 16;
  static constexpr uint64_t kGeneration = 24;
  static constexpr uint64_t kIndexOffset = 32;
  static constexpr uint64_t kGroups = 40;
  static constexpr uint64_t kHeapOffset = 48;
  static constexpr uint64_t kHeapBytes = 56;
  static constexpr uint64_t kChecksum = 64;  // CRC-32C of bytes [0, 64).
  // The grace period in microseconds (0: not set), the server's to set:
  // how long every client waits before it reuses a block it unlinked, and
  // so how long a reader may trust what it read. One for all, since a
  // client that trusted a read for longer than another waits to reuse a
  // block could read a block rewritten under it.
  static constexpr uint64_t kGracePeriod = 72;
  // Where clients hold their leases (see "Client sessions" below), the
  // server's to set at every start; also outside the checksum. Zero: the
  // server keeps no leases (an older build), and clients hold none.
  static constexpr uint64_t kSessionTable = 80;      // Remote address.
  static constexpr uint64_t kSessionTableKey = 88;   // rkey (4) | slots (4).
  static constexpr uint64_t kClientLease = 96;       // Microseconds.
  static constexpr uint64_t kHeaderFieldsEnd = 104;  // What a client reads.
  static constexpr uint64_t kHeapCursor = 128;       // Bytes of heap handed out.
  static constexpr uint64_t kFreePools = 1024;       // 256 free-pool heads, one per size class.
};

// Where everything lives, derived from the region size.
struct Layout {
  uint64_t region_bytes = 0;
  uint64_t generation = 0;
  uint64_t index_offset = 0;
  uint64_t groups = 0;
  uint64_t heap_offset = 0;
  uint64_t heap_bytes = 0;
  uint64_t grace_us = 0;  // 0: the region does not say.
  // The session table (0 slots: none) and the client lease.
  uint64_t session_table = 0;
  uint32_t session_rkey = 0;
  uint32_t session_slots = 0;
  uint64_t lease_us = 0;

  uint64_t slots() const { return groups * 3 * kSlotsPerBucket; }
  uint64_t group_offset(uint64_t g) const { return index_offset + g * kGroupBytes; }
};

// Whether two regions place every slot and block at the same offsets, as
// the replicas of one region must (their generations may differ).
inline bool SameGeometry(const Layout& a, const Layout& b) {
  return a.region_bytes == b.region_bytes && a.index_offset == b.index_offset &&
         a.groups == b.groups && a.heap_offset == b.heap_offset && a.heap_bytes == b.heap_bytes;
}

// Lays out a region of `region_bytes`, giving the index `index_share` of it
// (the rest, after the header, is heap). InvalidArgument if either part
// would be empty.
absl::StatusOr<Layout> ComputeLayout(uint64_t region_bytes, double index_share,
                                     uint64_t generation);

// Writes the header and zeroes the index of a fresh region.
void InitRegion(uint8_t* region, const Layout& layout);

// Sets the generation of an initialised region (a restart registers the
// region anew), stamps this build's format version and re-seals the header
// checksum.
void SetGeneration(uint8_t* region, uint64_t generation);
// Sets the region's grace period (HeaderOffsets::kGracePeriod).
void SetGracePeriod(uint8_t* region, uint64_t grace_us);

// Publishes the session table (its remote address, rkey and slots) and the
// client lease (HeaderOffsets::kSessionTable and on).
void SetSessionTable(uint8_t* region, uint64_t address, uint32_t rkey, uint32_t slots,
                     uint64_t lease_us);

// Reads and checks a region header: magic, version, checksum, and that the
// layout fits `region_bytes`. What a client or a restarting server trusts.
// The grace period and the session table are read when `header` reaches
// them.
absl::StatusOr<Layout> ParseHeader(absl::string_view header, uint64_t region_bytes);

// ---- Slots ---------------------------------------------------------------
// fingerprint (8) | size class (8) | block offset from region base (48).
// Blocks are 64-byte aligned, so the offset's low bits are free; the three
// lowest carry the slot's state:
//   committed      ...000  the key's value; the only state readers trust
//   pending        ...001  claimed by an insert, not yet decided
//   killed         ...011  a pending claim that lost to a rival; its owner
//                          clears it (so that it can tell "killed" from
//                          "committed, then changed by others")
// and, on the primary of a replicated region:
//   intent         ...010  the word is being copied to the backups; it
//                          becomes committed once every backup holds it
//   delete intent  ...110  the backups' slots are being emptied; the slot
//                          then becomes empty
// A backup's slot holds zero (never used), a committed word, or a
// tombstone: a delete intent's word, left where the primary's slot became
// empty. Backup slots never return to zero, so that a CAS from a word seen
// there cannot find that word again later (ABA): words name blocks, which
// are not reused within the grace period, but zero comes back after every
// delete.
// Zero is an empty slot.
struct Slot {
  uint8_t fingerprint = 0;
  uint8_t size_class = 0;
  uint64_t offset = 0;
  bool pending = false;

  uint64_t Encode() const;
  static Slot Decode(uint64_t word);
};

inline constexpr uint64_t kPendingBit = 1;
// Marks a word: a pending word marked is killed, a committed word marked
// is an intent.
inline constexpr uint64_t kMarkBit = 2;
inline constexpr uint64_t kDeleteBit = 4;
inline constexpr uint64_t kStateBits = kPendingBit | kMarkBit | kDeleteBit;
// The committed form of a slot word, whatever its state: the identity of
// the block it names.
inline uint64_t CommittedOf(uint64_t word) { return word & ~kStateBits; }
inline bool IsCommitted(uint64_t word) { return word != 0 && (word & kStateBits) == 0; }
inline bool IsKilled(uint64_t word) {
  return (word & (kPendingBit | kMarkBit)) == (kPendingBit | kMarkBit);
}
inline uint64_t KilledOf(uint64_t word) { return CommittedOf(word) | kPendingBit | kMarkBit; }
// Intents (replicated regions): of a committed word to be set, or to be
// deleted; and what the slot holds once the intent is done.
inline bool IsIntent(uint64_t word) { return (word & (kPendingBit | kMarkBit)) == kMarkBit; }
inline uint64_t IntentOf(uint64_t committed) { return committed | kMarkBit; }
inline uint64_t DeleteIntentOf(uint64_t committed) { return committed | kMarkBit | kDeleteBit; }
inline uint64_t IntentTarget(uint64_t intent) {
  return (intent & kDeleteBit) != 0 ? 0 : CommittedOf(intent);
}
// What a backup's slot holds once the intent is done: the committed word,
// or for a delete the tombstone.
inline uint64_t BackupTarget(uint64_t intent) {
  return (intent & kDeleteBit) != 0 ? intent : CommittedOf(intent);
}
inline bool IsTombstone(uint64_t word) { return IsIntent(word) && (word & kDeleteBit) != 0; }

// ---- Size classes ---------------------------------------------------------
// Class c (1..255) is a block size: c * 64 bytes up to 4 KiB, then 8 steps
// per doubling. The slot stores the class, so a reader fetches a whole
// block in one READ; blocks of a class are interchangeable for reuse.
uint64_t ClassBytes(uint8_t size_class);
// The smallest class holding `bytes`; 0 if none does.
uint8_t ClassFor(uint64_t bytes);

// ---- KV blocks ------------------------------------------------------------
// crc32c (4) | key length (2) | reserved (2) | value length (4) | reserved (4)
// | key | value | zero padding to 64 bytes. The checksum covers everything
// after itself up to the end of the value. Blocks are written once, before
// a slot points to them, and never changed while any slot does.
inline constexpr uint64_t kBlockHeaderBytes = 16;

uint64_t BlockBytes(size_t key_len, size_t value_len);  // Unpadded.
// Encodes a block into `out` (resized to the class size).
void EncodeBlock(absl::string_view key, absl::string_view value, std::string* out);
void EncodeBlockInto(absl::string_view key, absl::string_view value, uint8_t* out);

struct BlockView {
  absl::string_view key;
  absl::string_view value;
};
// Decodes a block read from the heap. DataLoss when the checksum or the
// lengths do not hold up: a torn read, or a block reused for another key.
// kLengthsOnly skips the checksum: only for the test hook that shows what
// the checksum prevents.
enum class BlockCheck { kChecksum, kLengthsOnly };
absl::StatusOr<BlockView> DecodeBlock(absl::string_view bytes,
                                      BlockCheck check = BlockCheck::kChecksum);

// ---- The free pool --------------------------------------------------------
// Blocks a client freed go back to the region when the client closes, so
// that other clients reuse them once the heap cursor has run out. There is
// one stack per size class. Its head word is tag (16) | node offset (48);
// every push and pop bumps the tag, so a CAS that read the head before a
// pop and a push of the same node fails (no ABA). A node is itself a freed
// block of its class: crc32c (4) | count (4) | next node (8) | `count`
// block offsets (8 each); the checksum covers everything after itself. A
// node uses at most the first 4 KiB of its block.
struct FreePoolHead {
  uint16_t tag = 0;
  uint64_t node = 0;  // Region offset; 0: empty.

  uint64_t Encode() const { return (uint64_t{tag} << 48) | node; }
  static FreePoolHead Decode(uint64_t word) {
    return {static_cast<uint16_t>(word >> 48), word & ((uint64_t{1} << 48) - 1)};
  }
};
inline uint64_t FreePoolHeadOffset(uint8_t size_class) {
  return HeaderOffsets::kFreePools + 8 * uint64_t{size_class};
}
inline constexpr uint64_t kFreeNodeHeaderBytes = 16;
// Bytes of a node of `size_class`, and the block offsets it lists.
uint64_t FreeNodeBytes(uint8_t size_class);
uint64_t FreeNodeCapacity(uint8_t size_class);

struct FreeNode {
  uint64_t next = 0;
  std::vector<uint64_t> blocks;
};
// Encodes a node into `out` (FreeNodeBytes(size_class) bytes); at most
// FreeNodeCapacity blocks.
void EncodeFreeNode(const FreeNode& node, uint8_t size_class, uint8_t* out);
void EncodeFreeNode(uint64_t next, absl::Span<const uint64_t> blocks, uint8_t size_class,
                    uint8_t* out);
// Decodes a node read from the heap. DataLoss unless its checksum holds and
// every offset (next included) names a block of the class inside the heap:
// a node popped by someone else meanwhile may already hold anything.
absl::StatusOr<FreeNode> DecodeFreeNode(absl::string_view bytes, uint8_t size_class,
                                        const Layout& layout);

// ---- Client sessions -----------------------------------------------------
// A client holds heap blocks between taking them and linking them (or
// handing them back), so the server must know which clients are alive:
// each holds a lease on every copy it reaches. The session table is
// registered memory of its own, volatile (a restart starts with none):
// kSessionTableHeaderBytes, then `slots` entries of
//   owner (8) | renewal (8) | census ack (8) | reserved (8)
// then the census report area (below). owner is the session's id — the
// fabric peer id its queue pairs carry, never 0 — claimed by a CAS from 0;
// renewal is a count the client writes at least every quarter lease. A
// session whose renewal the server has not seen change for a lease, or
// whose queue pairs there all closed (Listener::TakeDeparted), is
// fenced (Listener::Fence of its id: none of its requests executes
// afterwards) and its entry emptied; a client whose lease is in doubt takes
// a new session. A client that closes empties its entry itself.
inline constexpr uint64_t kSessionTableHeaderBytes = 64;
inline constexpr uint64_t kSessionEntryBytes = 32;
inline constexpr uint64_t SessionOwnerOffset(uint32_t slot) {
  return kSessionTableHeaderBytes + kSessionEntryBytes * slot;
}
inline constexpr uint64_t SessionRenewalOffset(uint32_t slot) {
  return SessionOwnerOffset(slot) + 8;
}
inline constexpr uint64_t SessionAckOffset(uint32_t slot) { return SessionOwnerOffset(slot) + 16; }

// The heap census: how a server takes back the heap of the sessions it
// fenced while it serves. A fenced session's blocks are those the index
// does not name, the free pool does not hold and no live session holds;
// live sessions say what they hold. The table's header:
//   round (8)            census round << 8 | phase, the server's to write
//   report cursor (8)    words of the report area taken (clients FAA it)
//   report capacity (8)  words the report area holds
//   departures (8)       sessions that began to close (clients FAA it)
// A round runs in phases a client learns of from the header, which it
// reads with each renewal:
//   1 holdings  every session reports what it holds (free lists, chunks,
//               blocks of operations in flight) and from then on keeps
//               track of what it takes or frees;
//   2+ tracked  the server has scanned the index, the pool and the heap
//               cursor; every session reports what it tracked so far,
//               and keeps tracking until the round ends. Should a session
//               present at the scan be fenced, or close, before every
//               session answered, the server scans anew and asks again
//               (the phase byte is 2 + the scan's number);
//   0 idle      no round (or the round ended or was given up).
// A session reports by FAA of the cursor, then WRITEs of its words and of
// its ack — the round word of the phase it answers — on one queue pair,
// so that the words have landed when the ack is seen. A session that
// claims its entry during a round tracks from then on. A session that
// closes counts itself in departures before it hands its heap back to the
// free pool, which the scan may have walked already: a scan during which
// one did so is done anew. The server then
// hands to the free pool every gap below the cursor it read that nothing
// marked. A report word stands alone (a report cut short by a fence spoils
// no other): size class << 56 | region offset, a block; or
// units << 48 | region offset | 1, a range of units * 64 bytes.
inline constexpr uint64_t kSessionRoundOffset = 0;
inline constexpr uint64_t kSessionReportCursorOffset = 8;
inline constexpr uint64_t kSessionReportCapacityOffset = 16;
inline constexpr uint64_t kSessionDeparturesOffset = 24;
inline constexpr uint64_t kCensusHeaderBytes = 24;  // What a client reads.
enum CensusPhase : uint64_t { kCensusIdle = 0, kCensusHoldings = 1, kCensusTracked = 2 };
inline constexpr uint64_t CensusRoundWord(uint64_t round, CensusPhase phase) {
  return round << 8 | phase;
}
// The tracked phase after the round's scan number `scan` (from 0): the
// phase byte is 2 + scan, so that each scan's word exceeds the last's.
inline constexpr uint64_t CensusTrackedWord(uint64_t round, uint32_t scan) {
  return round << 8 | (kCensusTracked + scan);
}
inline constexpr uint64_t CensusRoundOf(uint64_t word) { return word >> 8; }
inline constexpr CensusPhase CensusPhaseOf(uint64_t word) {
  return (word & 0xff) >= kCensusTracked ? kCensusTracked : static_cast<CensusPhase>(word & 0xff);
}
inline constexpr uint64_t ReportBlock(uint8_t size_class, uint64_t offset) {
  return uint64_t{size_class} << 56 | offset;
}
// Appends the words of the range [begin, end), region offsets aligned to
// kBlockAlign.
void AppendReportRange(uint64_t begin, uint64_t end, std::vector<uint64_t>* out);
// What a report word names: region offset and bytes (0 bytes: nothing).
struct ReportExtent {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
ReportExtent DecodeReportWord(uint64_t word);
inline constexpr uint64_t SessionReportOffset(uint32_t slots) { return SessionOwnerOffset(slots); }
inline constexpr uint64_t SessionTableBytes(uint32_t slots, uint64_t report_words) {
  return SessionReportOffset(slots) + 8 * report_words;
}

// ---- Hashing --------------------------------------------------------------
// Where a key may live: two combined buckets and a fingerprint.
struct KeyPlacement {
  uint64_t group[2];
  uint32_t side[2];  // 0: left (main0+overflow), 1: right (overflow+main1).
  uint8_t fingerprint;
};
KeyPlacement PlaceKey(absl::string_view key, uint64_t groups);
// Region offset of combined bucket `side` of group `g`.
inline uint64_t CombinedBucketOffset(const Layout& l, uint64_t g, uint32_t side) {
  return l.group_offset(g) + side * kBucketBytes;
}
// Where slot `i` (0..13) lies within the 128 bytes of a combined bucket:
// past the header of its 64-byte bucket.
inline uint64_t SlotOffsetInCombinedBucket(uint32_t i) {
  return (i / kSlotsPerBucket) * kBucketBytes + 8 * (1 + i % kSlotsPerBucket);
}
// Region offset of slot `i` (0..13) of a combined bucket at `bucket_offset`.
inline uint64_t SlotOffset(uint64_t bucket_offset, uint32_t i) {
  return bucket_offset + SlotOffsetInCombinedBucket(i);
}
// Whether the slot at `slot_offset` belongs to the combined bucket at
// `bucket_offset` (a shared overflow slot belongs to both of its group's).
inline bool InCombinedBucket(uint64_t bucket_offset, uint64_t slot_offset) {
  return slot_offset >= bucket_offset && slot_offset < bucket_offset + kCombinedBucketBytes;
}
// Whether the slot at `slot_offset` lies in its group's shared overflow
// bucket (the middle one).
inline bool IsOverflowSlot(const Layout& l, uint64_t slot_offset) {
  return (slot_offset - l.index_offset) % kGroupBytes / kBucketBytes == 1;
}
// Calls f(region offset) for every slot of the index.
template <typename F>
void ForEachSlot(const Layout& l, F f) {
  for (uint64_t g = 0; g < l.groups; ++g) {
    for (uint64_t b = 0; b < kGroupBytes / kBucketBytes; ++b) {
      for (uint64_t i = 1; i <= kSlotsPerBucket; ++i)
        f(l.group_offset(g) + b * kBucketBytes + 8 * i);
    }
  }
}

}  // namespace rkv::layout

#endif  // RKV_COMMON_LAYOUT_REGION_FORMAT_H_
