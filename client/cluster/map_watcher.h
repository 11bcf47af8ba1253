// The coordinator's map as one cluster client knows it, on the client's
// own thread: which map it takes from its source (map_source.h), and
// which fetch a retry waits for. Maps come two ways — the newest one the
// source was pushed, taken when the client calls Sync(), and a fetched one
// as the fetch's continuation runs on the client's thread (the fetch
// itself runs on the client's executor) — so that what a map decides (the
// groups and their sessions) is touched by that thread alone. A map older
// than one already taken (a coordinator restarted without its state file)
// is never taken: keys would go back to where they were.
#ifndef RKV_CLIENT_CLUSTER_MAP_WATCHER_H_
#define RKV_CLIENT_CLUSTER_MAP_WATCHER_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cluster/executor.h"
#include "client/cluster/map_source.h"

namespace rkv::client_internal {

class MapWatcher {
 public:
  // What the client does with what the watcher brings, on its own thread.
  class Listener {
   public:
    // A map no older than any taken before.
    virtual void Adopt(const proto::ClusterMap& map) = 0;
    // A fetch ended (fetched() counts it), its map adopted if one came.
    virtual void FetchEnded() = 0;

   protected:
    ~Listener() = default;
  };

  // Fetches run on the executor with a reference to `source`: they may
  // outlast nothing but the executor.
  MapWatcher(std::shared_ptr<MapSource> source, Listener& listener)
      : source_(std::move(source)), listener_(listener) {}
  MapWatcher(const MapWatcher&) = delete;
  MapWatcher& operator=(const MapWatcher&) = delete;

  // Fetches the map, blocking, and adopts it.
  absl::Status FetchNow();
  // Starts following the map's changes.
  void Watch() { source_->Watch(); }
  // Adopts the newest map the source was pushed since the last call, if any.
  void Sync() {
    if (std::unique_ptr<proto::ClusterMap> map = source_->TakeNewest()) Take(*map);
  }
  // Fetches the map on `executor` and adopts it once the fetch ends (a
  // failed fetch adopts nothing). Returns the number of a fetch that begins
  // after this call: fetched() reaches it once that fetch has ended.
  uint64_t Fetch(Executor& executor);
  uint64_t fetched() const { return fetches_done_; }

 private:
  // How long the fetch a client opens on may take, and one in the
  // background.
  static constexpr absl::Duration kOpenTimeout = absl::Seconds(5);
  static constexpr absl::Duration kFetchTimeout = absl::Seconds(2);

  void Take(const proto::ClusterMap& map);
  void OnFetched(Executor& executor, uint64_t fetch, absl::StatusOr<proto::ClusterMap> map);

  const std::shared_ptr<MapSource> source_;
  Listener& listener_;
  uint64_t epoch_ = 0;
  bool warned_epoch_ = false;
  uint64_t fetches_started_ = 0;
  uint64_t fetches_done_ = 0;
  bool fetch_again_ = false;  // A retry needs a fetch that starts later.
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_MAP_WATCHER_H_
