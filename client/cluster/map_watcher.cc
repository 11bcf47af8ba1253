#include "client/cluster/map_watcher.h"

#include <utility>

#include "common/logging.h"

namespace rkv::client_internal {

absl::Status MapWatcher::FetchNow() {
  absl::StatusOr<proto::ClusterMap> map = source_->Fetch(kOpenTimeout);
  if (!map.ok()) return map.status();
  Take(*map);
  return absl::OkStatus();
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

uint64_t MapWatcher::Fetch(Executor& executor) {
  if (fetches_started_ > fetches_done_) {
    // The fetch under way may have begun before what failed: one more.
    fetch_again_ = true;
    return fetches_started_ + 1;
  }
  const uint64_t fetch = ++fetches_started_;
  auto result = std::make_shared<absl::StatusOr<proto::ClusterMap>>();
  executor.Run(
      [source = source_, result] { *result = source->Fetch(kFetchTimeout); },
      [this, &executor, fetch, result] { OnFetched(executor, fetch, std::move(*result)); });
  return fetch;
}

void MapWatcher::OnFetched(Executor& executor, uint64_t fetch,
                           absl::StatusOr<proto::ClusterMap> map) {
  fetches_done_ = fetch;
  if (map.ok()) Take(*map);  // A failed fetch: retries go on the map there is.
  if (fetch_again_) {
    fetch_again_ = false;
    Fetch(executor);
  }
  listener_.FetchEnded();
}

}  // namespace rkv::client_internal
