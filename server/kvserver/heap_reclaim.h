// Takes back, while the region serves, the heap that client sessions the
// server fenced held: chunks they had reserved, blocks they had freed and
// not reused, blocks of writes they never linked. Those are the heap the
// index does not name, the free pool does not hold and no live session
// holds; a heap census finds them (common/layout/region_format.h, "The
// heap census"): live sessions report what they hold and track what they
// take meanwhile, the server marks the index, the pool and the reports on
// a HeapMap, and pushes every gap below the heap cursor onto the free pool
// — over a queue pair to its own region, so that the pushes are atomic
// with the clients' pops on every fabric (a NIC's atomics need not be with
// the CPU's). Nobody's operation waits for a round or fails because of one.
//
// Why it is safe: take a block B unmarked at the scan, so neither named
// nor pooled nor reported. Should a live session ever link or push B, it
// held B at the scan: B was then in what it reported as held (it held B
// at its ack, which came before the scan) or in what it tracked (it took
// B in between). A fenced session can do nothing at all any more; one
// fenced (or gone) after the scan but before its tracked report may have
// linked or pushed such a B, so the round scans anew, which sees it, and
// asks again (sessions track until the round ends).
//
// A replicated region's primary runs it for the group (its backups run
// none): a session fenced here may still reach a backup that has yet to
// fence it, and a backup's slots may name blocks the primary's do not (a
// tentative word of a failed write, which a takeover would make the key's).
// So a round scans only once no backup's session table holds a session
// fenced here since the last round (the backup fenced it, or it closed:
// either way nothing of it executes there any more), and marks every block
// a backup's slot names too, read over a queue pair to each backup. Steps
// run on the lease checker's thread (or the simulation's), never on the
// data path.
#ifndef RKV_SERVER_KVSERVER_HEAP_RECLAIM_H_
#define RKV_SERVER_KVSERVER_HEAP_RECLAIM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/fabric/fabric.h"
#include "common/layout/region_format.h"
#include "server/kvserver/heap_map.h"
#include "server/kvserver/session_leases.h"

namespace rkv::server {

class HeapReclaim {
 public:
  // `address`: how to reach the region now (its rkey changes when it is
  // fenced).
  HeapReclaim(fabric::Fabric& fabric, uint8_t* memory, const layout::Layout& layout,
              SessionLeases& leases, std::function<fabric::RemoteRegion()> address);
  ~HeapReclaim();
  HeapReclaim(const HeapReclaim&) = delete;
  HeapReclaim& operator=(const HeapReclaim&) = delete;

  // Runs after each lease check, with the sessions it fenced: starts a
  // round once a fenced session's heap waits for one, and moves a round on
  // as far as the sessions' acks allow.
  void Step(absl::Time now, absl::Span<const uint64_t> fenced);
  // A round is under way: steps should come every few milliseconds.
  bool busy() const { return phase_ != layout::kCensusIdle; }
  // Whether rounds may start (not on a replicated region's backups); a
  // round under way when disabled is given up at the next step.
  void set_enabled(bool enabled) { enabled_.store(enabled, std::memory_order_relaxed); }
  // The other copies of a replicated region, this one being its primary;
  // none for a region of one copy. A round under way is given up when
  // they change.
  void SetBackups(std::vector<fabric::RemoteRegion> backups);
  // Gives up the round under way.
  void Abandon(const char* why) {
    if (busy()) End(why);
  }
  // The region was fenced or settled: its pool is rebuilt (what a round
  // would push is pooled already), and no session of before reaches any
  // copy under the new registrations.
  void Reset();
  // Drops its queue pairs (the server stops serving); no step follows.
  void Disconnect();
  // Called without the lock the steps run under, by a fence that waits
  // for it: the step under way gives up at its next read of a backup or
  // push (a fence must not wait long). Reset ends it.
  void Interrupt() { interrupted_.store(true, std::memory_order_relaxed); }

  // Heap handed back to the pool since the start.
  uint64_t reclaimed_bytes() const { return reclaimed_.load(std::memory_order_relaxed); }

 private:
  struct Participant {
    uint32_t slot;
    uint64_t owner;
  };
  void Start(absl::Time now);
  // Notes the sessions present as the round's participants.
  void NoteParticipants();
  // The round word of the phase under way (of the last scan, when tracked).
  uint64_t RoundWord() const;
  // Every session acked the last scan and nothing spoiled it: marks the
  // reports and pushes the gaps.
  void Push();
  // Every participant still there acked `word`, and every session present
  // too when `everyone`; false while some must still answer. Sets
  // `*gone` when a participant left without being fenced (it closed: what
  // it handed back at close may have gone unseen).
  bool Acked(uint64_t word, bool everyone, bool* gone) const;
  // Whether no backup's session table holds a session fenced here since
  // the last round (reads them, at most every few milliseconds).
  absl::StatusOr<bool> BackupsFenced();
  // Marks the index and the pool; false when the pool would not hold still.
  bool Scan();
  // Marks the block a slot word names, if any.
  void MarkNamed(uint64_t word);
  // Marks what every backup's slots name.
  absl::Status MarkBackupSlots();
  // Marks the reports; false when they outran the report area.
  bool MarkReports();
  absl::StatusOr<uint64_t> PushGaps();
  absl::Status Connect();
  absl::Status AllocateStaging();
  struct Backup;
  // Connects to the backup and reads its header, unless connected.
  absl::Status ConnectBackup(Backup& b);
  // READs `bytes` at `address` of a backup into staging_, in pieces of at
  // most staging_.size() - 8 (a multiple of `unit`), calling f(bytes,
  // count) for each.
  template <typename F>
  absl::Status ReadBackup(Backup& b, uint64_t address, uint32_t rkey, uint64_t bytes, uint64_t unit,
                          F f);
  // Cancelled once Interrupt was called, until Reset.
  absl::Status CheckInterrupted() const;
  // Waits for `n` completions of `qp`, all successful.
  absl::Status Await(fabric::QueuePair& qp, size_t n, absl::Duration timeout, const char* what);
  // Pushes a node onto its class's stack (a WRITE of the node and a CAS of
  // the head, on the queue pair to the region).
  absl::Status PushNode(uint8_t size_class, uint64_t node, layout::FreeNode& contents);
  void End(const char* why);

  fabric::Fabric& fabric_;
  uint8_t* const memory_;
  const layout::Layout layout_;
  SessionLeases& leases_;
  const std::function<fabric::RemoteRegion()> address_;
  std::atomic<bool> enabled_{true};
  std::atomic<bool> interrupted_{false};

  bool owed_ = false;  // Fenced sessions' heap awaits a round.
  absl::Time retry_at_ = absl::InfinitePast();
  absl::Time now_;  // Of the last step.
  uint64_t round_ = 0;
  layout::CensusPhase phase_ = layout::kCensusIdle;
  absl::Time phase_since_;  // When the phase under way began.
  uint32_t scans_ = 0;      // Of the round under way.
  // Since the last scan a session present at it was fenced or closed, or
  // one began to close: the scan must be done anew.
  bool stale_ = false;
  uint64_t departures_ = 0;                // At the last scan.
  std::vector<Participant> participants_;  // Present at the start, then at the last scan.
  absl::flat_hash_set<uint64_t> fenced_;   // During the round.
  std::optional<HeapMap> map_;
  std::array<uint64_t, 256> named_bytes_{};
  uint64_t cursor_ = 0;  // The heap cursor at the scan.

  // The queue pair to the region, and its staging memory.
  std::unique_ptr<fabric::QueuePair> qp_;
  std::vector<uint8_t> staging_;
  std::unique_ptr<fabric::MemoryRegion> staging_mr_;
  fabric::RemoteRegion region_;

  std::atomic<uint64_t> reclaimed_{0};

  struct Backup {
    fabric::RemoteRegion region;
    std::unique_ptr<fabric::QueuePair> qp;
    layout::Layout layout;  // Its header's, once connected.
  };
  std::vector<Backup> backups_;
  // Sessions fenced here that a backup's table may still hold.
  absl::flat_hash_set<uint64_t> unconfirmed_;
  absl::Time backups_checked_ = absl::InfinitePast();
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_HEAP_RECLAIM_H_
