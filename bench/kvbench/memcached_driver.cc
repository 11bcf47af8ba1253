// kvbench on memcached through libmemcached. Reads started together go out
// as one multi-get (memcached's pipelining); libmemcached returns no reply
// for a buffered set, so writes are sent one at a time.
#include <libmemcached/memcached.h>

#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/kvbench/driver.h"
#include "client/protocol/outcome.h"
#include "common/socket.h"

namespace rkv::bench {
namespace {

class MemcachedDriver final : public Driver {
 public:
  explicit MemcachedDriver(memcached_st* memc) : memc_(memc) {}
  ~MemcachedDriver() override { memcached_free(memc_); }

  void Read(const std::string& key, ReadCallback done) override {
    reads_[key].push_back(std::move(done));
    ++in_flight_;
  }
  void Write(const std::string& key, const std::string& value, WriteCallback done) override {
    writes_.push_back({key, value, std::move(done)});
    ++in_flight_;
  }
  size_t in_flight() const override { return in_flight_; }

  void Poll(absl::Duration) override {
    // Callbacks may start operations: they wait for the next Poll.
    std::deque<PendingWrite> writes = std::exchange(writes_, {});
    std::map<std::string, std::vector<ReadCallback>> reads = std::exchange(reads_, {});
    for (PendingWrite& w : writes) {
      const memcached_return_t rc =
          memcached_set(memc_, w.key.data(), w.key.size(), w.value.data(), w.value.size(), 0, 0);
      --in_flight_;
      // A failed set may have been stored.
      w.done(rc == MEMCACHED_SUCCESS ? absl::OkStatus()
                                     : client_internal::WithUnknownOutcome(Error("set", rc)));
    }
    if (!reads.empty()) MultiGet(reads);
  }

 private:
  struct PendingWrite {
    std::string key;
    std::string value;
    WriteCallback done;
  };

  absl::Status Error(const char* what, memcached_return_t rc) {
    return absl::UnavailableError(
        absl::StrCat("memcached ", what, ": ", memcached_last_error_message(memc_)));
  }

  void MultiGet(std::map<std::string, std::vector<ReadCallback>>& reads) {
    std::vector<const char*> keys;
    std::vector<size_t> lengths;
    for (const auto& [key, callbacks] : reads) {
      keys.push_back(key.data());
      lengths.push_back(key.size());
    }
    memcached_return_t rc = memcached_mget(memc_, keys.data(), lengths.data(), keys.size());
    if (rc == MEMCACHED_SUCCESS) {
      memcached_result_st* result;
      while ((result = memcached_fetch_result(memc_, nullptr, &rc)) != nullptr) {
        const std::string key(memcached_result_key_value(result),
                              memcached_result_key_length(result));
        const std::string value(memcached_result_value(result), memcached_result_length(result));
        memcached_result_free(result);
        auto it = reads.find(key);
        if (it == reads.end()) continue;
        Finish(it->second, value);
        reads.erase(it);
      }
    }
    const bool failed = rc != MEMCACHED_END && rc != MEMCACHED_SUCCESS && rc != MEMCACHED_NOTFOUND;
    for (auto& [key, callbacks] : reads) {
      Finish(callbacks, failed ? Error("get", rc) : absl::NotFoundError(key));
    }
  }

  void Finish(std::vector<ReadCallback>& callbacks, const absl::StatusOr<std::string>& result) {
    for (ReadCallback& done : callbacks) {
      --in_flight_;
      done(result);
    }
  }

  memcached_st* memc_;
  std::deque<PendingWrite> writes_;
  std::map<std::string, std::vector<ReadCallback>> reads_;
  size_t in_flight_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Driver>> OpenMemcachedDriver(const DriverConfig& config) {
  absl::StatusOr<HostPort> where = ParseHostPort(config.address);
  if (!where.ok()) return where.status();
  memcached_st* memc = memcached_create(nullptr);
  if (memc == nullptr) return absl::ResourceExhaustedError("memcached_create failed");
  auto driver = std::make_unique<MemcachedDriver>(memc);
  memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
  memcached_return_t rc = memcached_server_add(memc, where->host.c_str(), where->port);
  if (rc == MEMCACHED_SUCCESS) rc = memcached_version(memc);
  if (rc != MEMCACHED_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("cannot reach memcached at ", config.address, ": ",
                                               memcached_last_error_message(memc)));
  }
  return driver;
}

}  // namespace rkv::bench
