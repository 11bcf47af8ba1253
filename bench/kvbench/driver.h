// A store under test, as kvbench drives it: reads and writes started
// asynchronously and finished by Poll(), one Driver per worker thread.
// Each driver keeps up to --outstanding operations in flight the way its
// store allows: rkv through its asynchronous API, Redis by pipelining,
// memcached by multi-get for reads (libmemcached has no pipelined set with
// replies, so its writes go one at a time).
#ifndef RKV_BENCH_KVBENCH_DRIVER_H_
#define RKV_BENCH_KVBENCH_DRIVER_H_

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/session/open_options.h"
#include "rkv/client.h"

namespace rkv::bench {

class Driver {
 public:
  using ReadCallback = std::function<void(absl::StatusOr<std::string>)>;
  using WriteCallback = std::function<void(absl::Status)>;
  virtual ~Driver() = default;

  // NotFound when the key is absent.
  virtual void Read(const std::string& key, ReadCallback done) = 0;
  // Insert or overwrite. A write (or insert or delete) that failed but may
  // have taken effect, now or later, says so with client/protocol/outcome.h's
  // outcome-unknown payload; --verify takes a failure without it for one
  // that changed nothing.
  virtual void Write(const std::string& key, const std::string& value, WriteCallback done) = 0;
  // rkv only (kvbench refuses --delete_proportion for other stores, whose
  // drivers answer Unimplemented at once): AlreadyExists when present.
  virtual void Insert(const std::string& key, const std::string& value, WriteCallback done);
  // rkv only, as Insert: NotFound when absent.
  virtual void Delete(const std::string& key, WriteCallback done);
  // Sends what was started and runs the callbacks of what finished (which
  // may start more). Waits up to `timeout` when nothing has finished yet.
  virtual void Poll(absl::Duration timeout) = 0;
  virtual size_t in_flight() const = 0;

  // What rkv's operations cost on the fabric; nullopt for other stores.
  virtual std::optional<std::array<OpCosts, kOpTypes>> costs() const { return std::nullopt; }
  // rkv: what the client library counted (outcomes, its latency buckets).
  virtual std::optional<std::array<OpStats, kOpTypes>> stats() const { return std::nullopt; }
};

struct DriverConfig {
  std::string kind;                  // "rkv", "memcached" or "redis".
  std::string address;               // Coordinator, memcached or Redis server, HOST:PORT.
  client_internal::OpenOptions rkv;  // For kind "rkv".
  int outstanding = 16;
};

// One connection to the store (one per worker thread).
absl::StatusOr<std::unique_ptr<Driver>> OpenDriver(const DriverConfig& config);

absl::StatusOr<std::unique_ptr<Driver>> OpenRkvDriver(const DriverConfig& config);
absl::StatusOr<std::unique_ptr<Driver>> OpenMemcachedDriver(const DriverConfig& config);
absl::StatusOr<std::unique_ptr<Driver>> OpenRedisDriver(const DriverConfig& config);

}  // namespace rkv::bench

#endif  // RKV_BENCH_KVBENCH_DRIVER_H_
