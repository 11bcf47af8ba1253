#include "client/cluster/map_watcher.h"

#include <utility>

#include "common/logging.h"

namespace rkv::client_internal {

MapWatcher::MapWatcher(const std::string& coordinator, const std::string& token, Listener& listener)
    : token_(token), coord_(coordinator, token), listener_(listener) {}

MapWatcher::~MapWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status MapWatcher::FetchNow() {
  proto::ClusterMap map;
  if (absl::Status s = coord_.GetClusterMap(&map); !s.ok()) return s;
  Take(map);
  return absl::OkStatus();
}

void MapWatcher::Watch() {
  thread_ = std::thread([this] { WatchLoop(); });
}

void MapWatcher::Take(const proto::ClusterMap& map) {
  if (map.epoch() < epoch_) {
    if (!warned_epoch_) {
      RKV_LOG(WARNING) << "the coordinator's map went back from epoch " << epoch_ << " to "
                       << map.epoch() << " (kvcoord restarted without --state_file?); "
                       << "keeping the map of epoch " << epoch_ << " until a newer one comes";
      warned_epoch_ = true;
    }
    return;
  }
  epoch_ = map.epoch();
  listener_.Adopt(map);
}

void MapWatcher::Sync() {
  std::unique_ptr<proto::ClusterMap> map;
  {
    std::lock_guard<std::mutex> lock(mu_);
    map = std::move(newer_);
  }
  if (map) Take(*map);
}

void MapWatcher::WatchLoop() {
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
    // The coordinator went away: keep the cached map and follow the next
    // one (any coordinator, leading or standing by, serves the map); after
    // a round of them, not at once.
    coord_.Next();
    if (++broken_ % coord_.addresses().size() == 0) absl::SleepFor(absl::Milliseconds(300));
  }
}

uint64_t MapWatcher::Fetch(BackgroundWorker& background) {
  if (fetches_started_ > fetches_done_) {
    // The fetch under way may have begun before what failed: one more.
    fetch_again_ = true;
    return fetches_started_ + 1;
  }
  const uint64_t fetch = ++fetches_started_;
  auto result = std::make_shared<absl::StatusOr<proto::ClusterMap>>();
  background.Run(
      [this, result] {
        proto::ClusterMap map;
        absl::Status s = coord_.GetClusterMap(&map, kFetchTimeout);
        *result = s.ok() ? absl::StatusOr<proto::ClusterMap>(std::move(map)) : s;
      },
      [this, &background, fetch, result] { OnFetched(background, fetch, std::move(*result)); });
  return fetch;
}

void MapWatcher::OnFetched(BackgroundWorker& background, uint64_t fetch,
                           absl::StatusOr<proto::ClusterMap> map) {
  fetches_done_ = fetch;
  if (map.ok()) Take(*map);  // A failed fetch: retries go on the map there is.
  if (fetch_again_) {
    fetch_again_ = false;
    Fetch(background);
  }
  listener_.FetchEnded();
}

}  // namespace rkv::client_internal
