#include "client/cluster/coordinator_map_source.h"

#include <utility>

namespace rkv::client_internal {

CoordinatorMapSource::CoordinatorMapSource(const std::string& coordinator, const std::string& token)
    : token_(token), coord_(coordinator, token) {}

CoordinatorMapSource::~CoordinatorMapSource() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<proto::ClusterMap> CoordinatorMapSource::Fetch(absl::Duration timeout) {
  proto::ClusterMap map;
  if (absl::Status s = coord_.GetClusterMap(&map, timeout); !s.ok()) return s;
  return map;
}

void CoordinatorMapSource::Watch() {
  thread_ = std::thread([this] { WatchLoop(); });
}

std::unique_ptr<proto::ClusterMap> CoordinatorMapSource::TakeNewest() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(newer_);
}

void CoordinatorMapSource::WatchLoop() {
  while (true) {
    grpc::ClientContext ctx;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      ctx_ = &ctx;
    }
    if (!token_.empty()) ctx.AddMetadata("rkv-token", token_);
    proto::WatchClusterMapRequest req;
    std::unique_ptr<grpc::ClientReader<proto::ClusterMap>> reader =
        coord_.stub().WatchClusterMap(&ctx, req);
    proto::ClusterMap map;
    while (reader->Read(&map)) {
      broken_ = 0;
      std::lock_guard<std::mutex> lock(mu_);
      newer_ = std::make_unique<proto::ClusterMap>(map);
    }
    (void)reader->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ctx_ = nullptr;
      if (stopping_) return;
    }
    // The coordinator went away: follow the next one; after a round of
    // them, not at once.
    coord_.Next();
    if (++broken_ % coord_.addresses().size() == 0) absl::SleepFor(absl::Milliseconds(300));
  }
}

}  // namespace rkv::client_internal
