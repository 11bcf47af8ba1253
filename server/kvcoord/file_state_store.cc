#include "server/kvcoord/file_state_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace rkv::server {

absl::StatusOr<proto::ClusterMap> FileStateStore::Read(const std::string& path) {
  proto::ClusterMap map;
  if (path.empty()) return map;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return map;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  if (!map.ParseFromIstream(&in) || map.epoch() == 0) {
    return absl::DataLossError(absl::StrCat(
        path, " is not a kvcoord state file (or is damaged); move it away to start afresh"));
  }
  return map;
}

absl::Status FileStateStore::Start(Listener& listener) {
  absl::StatusOr<proto::ClusterMap> state = Read(path_);
  if (!state.ok()) return state.status();
  state->set_term(state->term() + 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    term_ = state->term();
  }
  // A state never written keeps epoch 0 (nothing stored) until the
  // coordinator's first change.
  if (state->epoch() != 0) {
    if (absl::Status s = Commit(*state); !s.ok()) RKV_LOG(ERROR) << s;
  }
  listener.OnLead(*state);
  return absl::OkStatus();
}

absl::Status FileStateStore::Commit(const proto::ClusterMap& state) {
  if (path_.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  const std::string tmp = path_ + ".tmp";
  std::string bytes;
  state.SerializeToString(&bytes);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 &&
            ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) &&
            ::fsync(fd) == 0;
  if (fd >= 0) ok &= ::close(fd) == 0;
  ok = ok && ::rename(tmp.c_str(), path_.c_str()) == 0;
  if (ok) {
    const size_t slash = path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ok = dfd >= 0 && ::fsync(dfd) == 0;
    if (dfd >= 0) ::close(dfd);
  }
  if (!ok) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

Leadership FileStateStore::leadership() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {term_, absl::InfiniteFuture(), absl::InfiniteFuture()};
}

StoreDescription FileStateStore::Describe() const {
  return {path_.empty() ? "memory" : "file", "", {}};
}

}  // namespace rkv::server
