// A server's one registered region: memory laid out by the region format,
// registered with the fabric and reachable through a listener. After
// Create() the server's CPU has nothing to do on the data path: the fabric
// serves every GET, PUT and DELETE.
//
// With a region file the memory is a shared mapping of that file, so a
// killed server loses nothing clients were told was stored; started on an
// existing file, the server checks it and serves what it holds, under a new
// generation and a new rkey.
#ifndef RKV_SERVER_REGION_SERVER_H_
#define RKV_SERVER_REGION_SERVER_H_

#include <cstdint>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/fabric/fabric.h"
#include "common/layout/region_format.h"

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
};

struct RegionStats {
  uint64_t slots_total = 0;
  uint64_t slots_used = 0;
  uint64_t heap_bytes = 0;
  uint64_t heap_used = 0;
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
  // copy alone, keeping its free pool or not); with `wipe`, starts from a
  // blank region first. Only while fenced.
  absl::Status Settle(bool wipe, bool keep_pool);
  // Refuses every request from now on (the registration and the listener
  // go): for a server leaving its group, before it says so.
  void StopServing();
  // Copies the region whole (all but the header's identity) to `target`,
  // counting bytes into `copied`; Cancelled soon after *cancel is set. Only
  // while fenced, and the target too.
  absl::Status Push(const fabric::RemoteRegion& target, std::atomic<uint64_t>* copied,
                    const std::atomic<bool>* cancel);
  // Bytes one Push sends.
  uint64_t PushBytes() const;

  // Counts used slots and heap (a scan of the index: control plane only).
  RegionStats Stats() const;
  // Writes the region file back to disk (msync); no-op without a file.
  absl::Status Flush();

  // The region's bytes, for tests that inspect or stage its state. Peers
  // change them concurrently: access words with std::atomic_ref.
  uint8_t* MemoryForTesting() const { return memory_; }

 private:
  explicit RegionServer(fabric::Fabric& fabric) : fabric_(&fabric) {}
  absl::Status MapFile(const RegionServerOptions& options);
  // Push's WRITEs of [from, to) to target `t`, 16 of 256 KiB in flight.
  absl::Status PushRange(fabric::QueuePair& qp, const fabric::RemoteRegion& t, uint64_t from,
                         uint64_t to, std::atomic<uint64_t>* copied,
                         const std::atomic<bool>* cancel);

  fabric::Fabric* fabric_;
  std::string token_;
  layout::Layout layout_;
  uint8_t* memory_ = nullptr;  // mmap'ed, owned.
  uint64_t mapped_bytes_ = 0;
  bool recovered_ = false;
  uint64_t previous_generation_ = 0;
  bool file_backed_ = false;
  std::unique_ptr<fabric::MemoryRegion> region_;
  std::unique_ptr<fabric::Listener> listener_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_REGION_SERVER_H_
