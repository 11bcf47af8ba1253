#include "server/region_server.h"

#include <sys/mman.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rkv::server {

absl::StatusOr<std::unique_ptr<RegionServer>> RegionServer::Create(
    fabric::Fabric& fabric, const RegionServerOptions& options) {
  std::unique_ptr<RegionServer> s(new RegionServer());
  RKV_ASSIGN_OR_RETURN(s->layout_, layout::ComputeLayout(options.region_bytes,
                                                         options.index_share, options.generation));
  void* mem = ::mmap(nullptr, options.region_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap of a ", options.region_bytes, "-byte region"));
  }
  s->memory_ = static_cast<uint8_t*>(mem);
  layout::InitRegion(s->memory_, s->layout_);
  RKV_ASSIGN_OR_RETURN(s->region_,
                       fabric.RegisterMemory(s->memory_, options.region_bytes, fabric::kAllAccess));
  RKV_ASSIGN_OR_RETURN(s->listener_, fabric.Listen({options.listen_address, options.token}));
  return s;
}

RegionServer::~RegionServer() {
  listener_.reset();  // No peer touches the memory once these are gone.
  region_.reset();
  if (memory_ != nullptr) ::munmap(memory_, layout_.region_bytes);
}

fabric::RemoteRegion RegionServer::address() const {
  return {listener_->endpoint(), region_->remote_base(), region_->length(), region_->rkey()};
}

}  // namespace rkv::server
