// A server's one registered region: memory laid out by the region format,
// registered with the fabric and reachable through a listener. After
// Create() the server's CPU has nothing to do on the data path: the fabric
// serves every GET, PUT and DELETE.
#ifndef RKV_SERVER_REGION_SERVER_H_
#define RKV_SERVER_REGION_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

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
  uint64_t generation = 1;
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

 private:
  RegionServer() = default;

  layout::Layout layout_;
  uint8_t* memory_ = nullptr;  // mmap'ed, owned.
  std::unique_ptr<fabric::MemoryRegion> region_;
  std::unique_ptr<fabric::Listener> listener_;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_REGION_SERVER_H_
