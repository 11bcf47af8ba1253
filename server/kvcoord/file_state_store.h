// The one-process stores: the state in a file (kvcoord --state_file), or
// in memory only. This coordinator always leads; a restarted one leads
// again under the next term, from the file's state.
#ifndef RKV_SERVER_KVCOORD_FILE_STATE_STORE_H_
#define RKV_SERVER_KVCOORD_FILE_STATE_STORE_H_

#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "server/kvcoord/state_store.h"

namespace rkv::server {

class FileStateStore final : public StateStore {
 public:
  // `path` empty: memory only.
  explicit FileStateStore(std::string path) : path_(std::move(path)) {}

  // Reads the file (a missing one is a first start); an error when it
  // does not parse.
  absl::Status Start(Listener& listener) override;
  void Stop() override {}
  // Writes the file whole, renamed into place, the rename made durable: a
  // crash leaves the old state or the new one, never a torn one.
  absl::Status Commit(const proto::ClusterMap& state) override;
  Leadership leadership() const override;
  bool Current() const override { return true; }
  std::string LeaderAddress() const override { return ""; }
  StoreDescription Describe() const override;

  // The state the file holds (epoch 0: none), for a first look before
  // Start, and for moving it into etcd.
  static absl::StatusOr<proto::ClusterMap> Read(const std::string& path);

 private:
  const std::string path_;
  mutable std::mutex mu_;
  uint64_t term_ = 0;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_FILE_STATE_STORE_H_
