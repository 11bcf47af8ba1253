// The coordinator's map as one cluster client knows it. A thread of its
// own follows the coordinator's watch stream, which stays open for the
// client's life; the fetches that retries ask for run on the client's
// background worker. Both hand their maps to the client's own thread — the
// newest streamed one when it calls Sync(), a fetched one as the fetch's
// continuation runs there — so that what a map decides (the groups and
// their sessions) is touched by that thread alone. A map older than one
// already taken (a coordinator restarted without its state file) is never
// taken: keys would go back to where they were.
#ifndef RKV_CLIENT_CLUSTER_MAP_WATCHER_H_
#define RKV_CLIENT_CLUSTER_MAP_WATCHER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cluster/background_worker.h"
#include "proto/coordinator_stub.h"

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

  MapWatcher(const std::string& coordinator, const std::string& token, Listener& listener);
  // Ends the watch stream and joins its thread. Stop the background
  // worker first: its fetches use this watcher.
  ~MapWatcher();
  MapWatcher(const MapWatcher&) = delete;
  MapWatcher& operator=(const MapWatcher&) = delete;

  // Fetches the map, blocking, and adopts it.
  absl::Status FetchNow();
  // Starts following the watch stream.
  void Watch();
  // Adopts the newest map the stream brought since the last call, if any.
  void Sync();
  // Fetches the map on `background` and adopts it once the fetch ends (a
  // failed fetch adopts nothing). Returns the number of a fetch that begins
  // after this call: fetched() reaches it once that fetch has ended.
  uint64_t Fetch(BackgroundWorker& background);
  uint64_t fetched() const { return fetches_done_; }

 private:
  // How long one fetch in the background may take.
  static constexpr absl::Duration kFetchTimeout = absl::Seconds(2);

  void WatchLoop();
  void Take(const proto::ClusterMap& map);
  void OnFetched(BackgroundWorker& background, uint64_t fetch,
                 absl::StatusOr<proto::ClusterMap> map);

  const std::string token_;
  CoordinatorStub coord_;
  Listener& listener_;

  // The client's thread's.
  uint64_t epoch_ = 0;
  bool warned_epoch_ = false;
  uint64_t fetches_started_ = 0;
  uint64_t fetches_done_ = 0;
  bool fetch_again_ = false;  // A retry needs a fetch that starts later.

  // Written by the watch thread, taken by the client's thread.
  std::mutex mu_;
  std::unique_ptr<proto::ClusterMap> newer_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  // The watch thread's: streams that ended since one last brought a map.
  size_t broken_ = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_MAP_WATCHER_H_
