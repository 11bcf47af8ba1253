// rkv client library: GET, PUT, INSERT and DELETE on a cluster of rkv
// servers with one-sided RDMA only (READ, WRITE, CAS, FAA). No server CPU
// runs key-value logic.
//
//   rkv::ClientOptions options;
//   options.cluster_token = token;  // The cluster's, if it has one.
//   auto client = rkv::Client::OpenCluster("10.0.0.1:7000", options);
//   if (!client.ok()) return client.status();
//   absl::Status s = (*client)->Put("k", "v");
//   absl::StatusOr<std::string> v = (*client)->Get("k");
//
// The asynchronous calls let one thread keep many operations in flight;
// their requests share doorbells. Drive them with Poll(). A Client is used
// by one thread at a time; open one per thread.
//
// This header is the library's whole public surface (librkv, CMake
// `find_package(rkv)` and target `rkv::client`, or pkg-config `rkv`). It
// needs C++20 and the Abseil that librkv was built with (absl::Status,
// absl::StatusOr, absl::string_view, absl::Duration and absl::Time appear in
// it): on Debian 12, libabsl-dev's.
#ifndef RKV_CLIENT_INCLUDE_RKV_CLIENT_H_
#define RKV_CLIENT_INCLUDE_RKV_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rkv {

struct ClientOptions {
  // The fabric the client opens: "auto" (verbs when an RDMA device exists,
  // soft otherwise), "verbs" (RDMA through rdma-core) or "soft" (software
  // RDMA over TCP, for machines without RDMA); and for verbs the device
  // (ibv_devices lists them; empty: the first).
  std::string fabric_kind = "auto";
  std::string rdma_device;
  // The cluster token: sent to the coordinator and in fabric handshakes.
  std::string cluster_token;
  // Operations in flight at once; more are queued.
  uint32_t max_outstanding = 64;
  // Key -> (slot, slot value) entries kept (0 disables the cache), 56
  // bytes each (keys are not stored: an entry is named by a 128-bit hash);
  // the default takes 7 MiB.
  size_t cache_entries = 1 << 17;
  // A replaced or deleted block is reused only this long after it was
  // unlinked; a reader whose bucket read and block read are further apart
  // starts over. Every client of a region must use the same, so a server
  // says which (kvserver --grace_period) and the client takes that: this
  // one counts only with a server of an older build, which does not say.
  absl::Duration grace_period = absl::Milliseconds(200);
  // Heap taken from the server per FAA.
  uint64_t heap_chunk_bytes = 256 << 10;
  // Registered local memory for requests' buffers; at least 2 MiB + 4 KiB.
  uint64_t scratch_bytes = 8 << 20;
  // Seeds the choice among free slots, and the client's session id with
  // each server (0: a random seed). Clients given the same seed share a
  // session id, and so a fence: give each its own.
  uint64_t seed = 0;
};

enum class OpType { kGet = 0, kPut = 1, kInsert = 2, kDelete = 3 };
inline constexpr int kOpTypes = 4;

// What operations of one type cost, summed.
struct OpCosts {
  uint64_t ops = 0;
  uint64_t round_trips = 0;  // Doorbells whose completion the operation waited for.
  uint64_t requests = 0;
  uint64_t bytes = 0;
  uint64_t retries = 0;  // Restarts: torn or reused blocks, lost races.
};

// How operations ended, as their callbacks were told.
enum class OpOutcome {
  kOk = 0,
  kNotFound = 1,       // A GET or DELETE of an absent key.
  kAlreadyExists = 2,  // An INSERT of a present key.
  kUnavailable = 3,    // Outcome unknown (see GetAsync below).
  kFailed = 4,         // Any other error: bad arguments, a full heap, cancelled...
};
inline constexpr int kOpOutcomes = 5;

// Latencies are counted in buckets: bucket i holds the operations that took
// at most LatencyBucketBound(i) and more than the bound below it — 2^i
// microseconds (1 us to about 4.2 s) — and the last bucket all longer ones.
inline constexpr int kLatencyBuckets = 24;
inline absl::Duration LatencyBucketBound(int i) {
  return i + 1 < kLatencyBuckets ? absl::Microseconds(int64_t{1} << i) : absl::InfiniteDuration();
}

// What operations of one type came to, counted when each callback runs:
// outcomes, and latency from the call to the callback (a cluster client's
// retries and waits for a reconfiguring group included).
struct OpStats {
  uint64_t outcomes[kOpOutcomes] = {};             // Indexed by OpOutcome.
  uint64_t latency_buckets[kLatencyBuckets] = {};  // Not cumulative.
  absl::Duration latency_sum = absl::ZeroDuration();
};

class Client {
 public:
  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;
  using DoneCallback = std::function<void(absl::Status)>;

  // A client of a whole cluster, whose coordinators are at `coordinator`
  // ("host:port", or several comma-separated: it reads the map from any
  // that answers, so it goes on when one is lost): fetches and watches the
  // coordinators' map, places each
  // key on a replica group by rendezvous hashing of the group ids (so every
  // client agrees), connects to servers lazily, and after a failure
  // refreshes the map and retries once where that is safe (a restarted
  // server has a new rkey). Keys of a group that is down fail fast with
  // Unavailable. Its sessions with the servers share one fabric, one
  // scratch memory and one slot cache. Connects and map fetches run on
  // background threads: no asynchronous call waits on the network.
  // Keys up to 1 KiB; values up to 1 MiB.
  static absl::StatusOr<std::unique_ptr<Client>> OpenCluster(const std::string& coordinator,
                                                             const ClientOptions& options = {});
  // Every operation's callback runs exactly once. Destroying a client runs
  // those of operations still in flight, with Cancelled; they must not use
  // the client.
  virtual ~Client() = default;

  // Synchronous operations: the asynchronous ones, driven until done (so
  // they also finish whatever else is in flight).
  // NotFound when absent.
  absl::StatusOr<std::string> Get(absl::string_view key);
  // Insert or overwrite.
  absl::Status Put(absl::string_view key, absl::string_view value);
  // AlreadyExists when present.
  absl::Status Insert(absl::string_view key, absl::string_view value);
  // NotFound when absent.
  absl::Status Delete(absl::string_view key);

  // Asynchronous forms: start the operation and return; `done` runs inside
  // a later Poll(). Errors in the arguments are reported through `done`.
  // Unavailable means the operation failed on its way to the server or
  // back: it may or may not have taken effect, now or later ("outcome
  // unknown" in the message; docs/RELIABILITY.md). A cluster client
  // retries such a failure once where that is safe: a GET always, a write
  // only when it cannot have taken effect.
  // A client runs its writes of one key one at a time, in the order they
  // were submitted (a cluster client's retried write goes behind the
  // others); reads run beside them.
  virtual void GetAsync(absl::string_view key, GetCallback done) = 0;
  virtual void PutAsync(absl::string_view key, absl::string_view value, DoneCallback done) = 0;
  virtual void InsertAsync(absl::string_view key, absl::string_view value, DoneCallback done) = 0;
  virtual void DeleteAsync(absl::string_view key, DoneCallback done) = 0;

  // Posts what in-flight operations need (one doorbell per server for all
  // of them), handles completions, and runs callbacks. Waits up to
  // `timeout` for a completion from any server when nothing else can
  // progress. Returns operations finished.
  virtual size_t Poll(absl::Duration timeout = absl::ZeroDuration()) = 0;
  // Operations started and not yet finished. A replicated write's callback
  // runs once every copy holds it; the commit it then posts on the primary
  // counts here until it lands, so Drain() and the synchronous calls
  // return after it.
  virtual size_t in_flight() const = 0;

  // What this client's operations of `type` have cost so far.
  virtual OpCosts costs(OpType type) const = 0;
  // How they ended and how long they took, so far.
  virtual OpStats stats(OpType type) const = 0;

 private:
  void Drain();
};

}  // namespace rkv

#endif  // RKV_CLIENT_INCLUDE_RKV_CLIENT_H_
