#include "bench/kvbench/driver.h"

#include "absl/strings/str_cat.h"

namespace rkv::bench {

void Driver::Insert(const std::string&, const std::string&, WriteCallback done) {
  done(absl::UnimplementedError("this store's driver has no insert"));
}

void Driver::Delete(const std::string&, WriteCallback done) {
  done(absl::UnimplementedError("this store's driver has no delete"));
}

absl::StatusOr<std::unique_ptr<Driver>> OpenDriver(const DriverConfig& config) {
  if (config.kind == "rkv") return OpenRkvDriver(config);
  if (config.kind == "memcached") return OpenMemcachedDriver(config);
  if (config.kind == "redis") return OpenRedisDriver(config);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown driver '", config.kind, "': use rkv, memcached or redis"));
}

}  // namespace rkv::bench
