// A server's one registered region: memory laid out by the region format,
// registered with the fabric and reachable through a listener. After
// Create() the server's CPU has nothing to do on the data path: the fabric
// serves every GET, PUT and DELETE.
//
// With a region file the memory is a shared mapping of that file, so a
// killed server loses nothing clients were told was stored; started on an
// existing file, the server checks it, rebuilds its free pool from what the
// index names (Settle), and serves what it holds, under a new generation
// and a new rkey.
#ifndef RKV_SERVER_KVSERVER_REGION_SERVER_H_
#define RKV_SERVER_KVSERVER_REGION_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/fabric/fabric.h"
#include "common/layout/region_format.h"
#include "common/monotonic_clock.h"
#include "server/kvserver/heap_reclaim.h"
#include "server/kvserver/session_leases.h"

namespace rkv::server {

struct RegionServerOptions {
  uint64_t region_bytes = 64 << 20;
  // Share of the region given to the hash index; the rest is heap. 0.25
  // suits values of a few hundred bytes (one 8-byte slot per ~24 bytes of
  // index, against blocks of 64 bytes and up).
  double index_share = 0.25;
  std::string listen_address = "127.0.0.1:0";
  std::string token;
  // Soft fabric over TCP: the target's event-loop threads (0: a default
  // that fits the cores). See ListenOptions::soft_threads.
  uint32_t soft_threads = 0;
  uint64_t generation = 1;
  // Empty: anonymous memory, lost with the process.
  std::string region_file;
  // How long clients wait before they reuse a block they unlinked, and so
  // how long one may trust a read; one for all, written in the header.
  // Longer than any stall a reader may suffer between its bucket read and
  // its block read (and than the fabric's retry budget).
  absl::Duration grace_period = absl::Milliseconds(200);
  // How long a client session lives past its last renewal before it is
  // fenced (SessionLeases); zero: no sessions, as with a server of an
  // older build (clients then hold no lease, and nothing is fenced).
  absl::Duration client_lease = absl::Seconds(5);
  uint32_t session_slots = 4096;
  // Whether a thread of the server checks the leases; false: its owner
  // calls CheckLeases (the deterministic simulation, on its own clock).
  bool lease_thread = true;
  // What the lease thread and a push's timeouts and rate ceiling read
  // (empty: the machine's monotonic clock).
  Clock clock;
  // Whether the heap fenced sessions held is taken back while serving
  // (HeapReclaim): on a replicated region, only by the primary, once told
  // its backups (SetReclaim).
  bool reclaim = true;
  // Room for the heap census's reports (0: a 64th of the heap, from 1 to
  // 64 MiB): what live sessions hold, 8 bytes a block.
  uint64_t census_report_bytes = 0;
};

struct RegionStats {
  uint64_t slots_total = 0;
  uint64_t slots_used = 0;
  uint64_t heap_bytes = 0;
  uint64_t heap_used = 0;          // Handed out by the heap cursor.
  uint64_t heap_live = 0;          // Of it, blocks that slots name.
  uint64_t heap_pooled = 0;        // Of it, blocks in the free pool.
  bool heap_pool_partial = false;  // heap_pooled is a lower bound.
  uint32_t sessions = 0;           // Client sessions holding a lease.
  uint64_t sessions_fenced = 0;    // Since the server started.
  uint64_t heap_reclaimed = 0;     // Fenced sessions' heap taken back, since the start.
};

class RegionServer {
 public:
  static absl::StatusOr<std::unique_ptr<RegionServer>> Create(fabric::Fabric& fabric,
                                                              const RegionServerOptions& options);
  ~RegionServer();
  RegionServer(const RegionServer&) = delete;
  RegionServer& operator=(const RegionServer&) = delete;

  // What a client needs to reach the region.
  fabric::RemoteRegion address() const;
  const layout::Layout& layout() const { return layout_; }
  uint64_t generation() const { return layout_.generation; }
  // The node's monotonic clock (RegionServerOptions::clock): what its
  // leases, and its agent's, are timed on.
  const Clock& clock() const { return clock_; }
  // True when the region came from an existing file.
  bool recovered() const { return recovered_; }

  // Registers the memory anew, under a new rkey and `generation` (the
  // header too), and drops the old registration: once this returns, no
  // request naming the old rkey touches the region. A replica group's
  // members are fenced so before they are made to agree, so that no client
  // of an older configuration can undo what that settles.
  absl::Status Fence(uint64_t generation);
  // The generation this memory was registered under before this
  // registration (a fence's, or a reopened region file's); 0 when blank.
  uint64_t previous_generation() const { return previous_generation_; }
  // Makes this copy fit to serve as its group's primary (TakeOver of this
  // copy alone: its heap reclaimed into the free pool); with `wipe`,
  // starts from a blank region first. Only while fenced.
  absl::Status Settle(bool wipe);
  // Refuses every request from now on (the registration and the listener
  // go): for a server leaving its group, before it says so.
  void StopServing();
  // Fences the client sessions whose lease lapsed by `now` (SessionLeases::
  // Check); returns their ids. For the deterministic simulation, which
  // runs without the lease thread.
  std::vector<uint64_t> CheckLeases(absl::Time now);
  // Whether the heap of fenced sessions is taken back while serving
  // (RegionServerOptions::reclaim), and for a replicated region's primary
  // its backups' regions as they serve (HeapReclaim::SetBackups); a round
  // under way is given up when either changes.
  void SetReclaim(bool enabled, std::vector<fabric::RemoteRegion> backups = {});
  // The bytes a push sends (all but the header's identity), in chunks:
  // the heap, then the index, then the header's cursor and free pool.
  struct Chunk {
    uint64_t offset = 0;
    uint32_t length = 0;
    bool starts_range = false;  // The first of the heap, the index, the header.
  };
  std::vector<Chunk> PushChunks() const;
  // Bytes one Push sends at most.
  uint64_t PushBytes() const;
  // A hash of each of PushChunks' chunks of this memory as it is: what a
  // fenced member tells its group's pusher, which then sends only the
  // chunks that differ.
  std::vector<uint64_t> ChunkHashes() const;

  struct PushControl {
    // Bytes brought to agree so far: sent, or found equal by hash.
    std::atomic<uint64_t>* copied = nullptr;
    // Cancelled soon after this is set (required).
    const std::atomic<bool>* cancel = nullptr;
    // A ceiling on the bytes sent per second; 0: none.
    uint64_t bytes_per_second = 0;
    // Called before each wait for the target's completions: where the
    // deterministic simulation, which runs everything on one thread, lets
    // its clients work during a copy.
    std::function<void()> while_waiting;
  };
  // Copies the region to `target`: every chunk whose hash differs from
  // `target_hashes` (the target's ChunkHashes, taken since it was fenced),
  // all of them when that is empty. Refuses a target of another geometry.
  // Returns the bytes sent. Fenced (and the target too), this makes the
  // target an exact copy; serving (a live copy to a spare no client
  // reaches), a copy as of no single moment, which a later push under a
  // fence completes.
  absl::StatusOr<uint64_t> Push(const fabric::RemoteRegion& target,
                                absl::Span<const uint64_t> target_hashes,
                                const PushControl& control);

  // Counts used slots and heap (a scan of the index and the free pool:
  // control plane only).
  RegionStats Stats() const;
  // What the listener has served clients (fabric::ListenerCounters), for
  // /metrics; after StopServing, what it had served, with no connection
  // open. Thread-safe.
  fabric::ListenerCounters FabricCounters() const;
  // Writes the region file back to disk (msync); no-op without a file.
  absl::Status Flush();

  // The region's bytes, for tests that inspect or stage its state. Peers
  // change them concurrently: access words with std::atomic_ref.
  uint8_t* MemoryForTesting() const { return memory_; }

 private:
  RegionServer(fabric::Fabric& fabric, Clock clock)
      : fabric_(&fabric), clock_(OrMonotonic(std::move(clock))) {}
  absl::Status MapFile(const RegionServerOptions& options);
  uint64_t PushChunkBytes() const;
  void RunLeaseChecks();
  void StopLeaseChecks();
  std::vector<uint64_t> CheckLeasesLocked(absl::Time now);  // lease_mu_ held.

  // Push, in steps; PushState (region_server.cc) carries one push's
  // connection, staging memory and window of chunks in flight between them.
  struct PushState;
  // A target of this region's size, and a hash per chunk if any.
  absl::Status CheckPushArguments(const fabric::RemoteRegion& t, size_t target_hashes,
                                  size_t chunks) const;
  absl::StatusOr<std::unique_ptr<PushState>> OpenPush(const fabric::RemoteRegion& t);
  // Reads the target's header and checks that its geometry is this one's.
  absl::Status CheckTarget(fabric::QueuePair& qp, const fabric::RemoteRegion& t, uint8_t* buffer,
                           uint32_t lkey);
  // Stages the next chunks into free slots and posts those the target
  // lacks, as far as the window, the rate ceiling and range order allow.
  absl::Status PostChunks(PushState& push, absl::Span<const Chunk> chunks,
                          const fabric::RemoteRegion& t, absl::Span<const uint64_t> target_hashes,
                          const PushControl& control);

  fabric::Fabric* fabric_;
  const Clock clock_;
  std::string token_;
  layout::Layout layout_;
  uint8_t* memory_ = nullptr;  // mmap'ed, owned.
  uint64_t mapped_bytes_ = 0;
  bool recovered_ = false;
  uint64_t previous_generation_ = 0;
  bool file_backed_ = false;
  std::unique_ptr<fabric::MemoryRegion> region_;
  std::unique_ptr<fabric::Listener> listener_;
  // Held while listener_ goes (StopServing) and by FabricCounters, which a
  // metrics scrape calls from a thread of its own. The threads that use
  // listener_ otherwise run before StopServing, or are stopped by it.
  mutable std::mutex listener_mu_;
  fabric::ListenerCounters stopped_counters_;  // Guarded by listener_mu_.
  std::unique_ptr<SessionLeases> leases_;      // Null: no client sessions.
  std::unique_ptr<HeapReclaim> reclaim_;       // With leases_; guarded by lease_mu_.
  // Checks the leases every eighth of one; stopped before the listener goes.
  // std::mutex, whose synchronisation ThreadSanitizer sees (Debian's Abseil
  // is not built for it).
  std::mutex lease_mu_;
  std::condition_variable lease_cv_;
  bool stop_leases_ = false;  // Guarded by lease_mu_.
  std::thread lease_thread_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_REGION_SERVER_H_
