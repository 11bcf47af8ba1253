#include "server/kvcoord/coordinator_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "common/socket.h"

namespace rkv::server {
namespace {

grpc::Status Invalid(const std::string& why) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
}

grpc::Status ValidateId(const std::string& id) {
  if (id.empty() || id.size() > 64) return Invalid("server id must be 1 to 64 characters");
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return Invalid(
          absl::StrCat("server id '", id, "' may hold only letters, digits, '-', '_' and '.'"));
    }
  }
  return grpc::Status::OK;
}

grpc::Status ValidateRegion(const proto::RegionDescriptor& r) {
  if (r.endpoint().kind() != "soft" && r.endpoint().kind() != "verbs") {
    return Invalid(absl::StrCat("fabric kind '", r.endpoint().kind(), "': want soft or verbs"));
  }
  if (!ParseHostPort(r.endpoint().address()).ok() ||
      ParseHostPort(r.endpoint().address())->port == 0) {
    return Invalid(
        absl::StrCat("fabric address '", r.endpoint().address(), "' is not host:port with a port"));
  }
  if (r.base_address() == 0 || r.length() < 4096 || r.length() > (uint64_t{1} << 46)) {
    return Invalid("region base must be set and its length between 4 KiB and 64 TiB");
  }
  if (r.generation() == 0) return Invalid("region generation must be positive");
  return grpc::Status::OK;
}

}  // namespace

CoordinatorService::CoordinatorService(std::string token, absl::Duration lease,
                                       std::string state_file, uint32_t replicas)
    : token_(std::move(token)),
      lease_(lease),
      state_file_(std::move(state_file)),
      groups_(replicas) {
  lease_thread_ = std::thread([this] { LeaseLoop(); });
}

absl::Status CoordinatorService::Recover() {
  if (state_file_.empty()) return absl::OkStatus();
  std::ifstream in(state_file_, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", state_file_, ": ", std::strerror(errno)));
  }
  proto::ClusterMap map;
  if (!map.ParseFromIstream(&in) || map.epoch() == 0) {
    return absl::DataLossError(absl::StrCat(
        state_file_, " is not a kvcoord state file (or is damaged); move it away to start afresh"));
  }
  if (std::max<uint32_t>(1, map.replicas()) != groups_.replicas()) {
    return absl::FailedPreconditionError(
        absl::StrCat(state_file_, " holds a cluster of ", std::max<uint32_t>(1, map.replicas()),
                     " copies, not the ", groups_.replicas(), " of --replicas"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = groups_.Load(map); !s.ok()) {
    return absl::DataLossError(absl::StrCat(state_file_, " holds a damaged replica group (",
                                            s.message(), "); move it away to start afresh"));
  }
  const absl::Time now = MonotonicNow();
  for (const proto::ServerInfo& s : map.servers()) {
    Member& m = members_[s.id()];
    m.info = s;
    m.info.clear_last_heard_ms();
    m.last_heard = now;  // Servers that were up get a whole lease to check in.
  }
  epoch_ = map.epoch();
  ChangedLocked();
  RKV_LOG(INFO) << "recovered " << members_.size() << " servers from " << state_file_ << "; epoch "
                << epoch_;
  return absl::OkStatus();
}

CoordinatorService::~CoordinatorService() {
  Stop();
  lease_thread_.join();
}

void CoordinatorService::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  changed_.notify_all();
}

grpc::Status CoordinatorService::Authenticate(grpc::ServerContext* ctx, const char* method) const {
  if (token_.empty()) return grpc::Status::OK;
  auto it = ctx->client_metadata().find(kTokenMetadata);
  if (it != ctx->client_metadata().end() &&
      std::string(it->second.data(), it->second.size()) == token_) {
    return grpc::Status::OK;
  }
  RKV_LOG(WARNING) << "rejected " << method << " from " << ctx->peer()
                   << ": missing or wrong cluster token";
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong cluster token (metadata rkv-token)");
}

std::map<std::string, ServerView> CoordinatorService::ViewsLocked() const {
  std::map<std::string, ServerView> views;
  for (const auto& [id, m] : members_) {
    views[id] = {m.info.state() == proto::SERVER_STATE_UP, m.info.region().generation(),
                 m.info.region().length(), m.info.lineage()};
  }
  return views;
}

void CoordinatorService::ChangedLocked() {
  groups_.Update(ViewsLocked());
  epoch_++;
  changed_.notify_all();
  SaveLocked();
}

void CoordinatorService::SaveLocked() {
  if (state_file_.empty()) return;
  // Written whole, renamed into place, and the rename made durable: a
  // crash leaves the old file or the new one, never a torn one.
  const std::string tmp = state_file_ + ".tmp";
  std::string bytes;
  MapLocked().SerializeToString(&bytes);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 &&
            ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) &&
            ::fsync(fd) == 0;
  if (fd >= 0) ok &= ::close(fd) == 0;
  ok = ok && ::rename(tmp.c_str(), state_file_.c_str()) == 0;
  if (ok) {
    const size_t slash = state_file_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : state_file_.substr(0, slash + 1);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ok = dfd >= 0 && ::fsync(dfd) == 0;
    if (dfd >= 0) ::close(dfd);
  }
  if (!ok && saved_) {
    RKV_LOG(ERROR) << "cannot write " << state_file_ << ": " << std::strerror(errno)
                   << "; no push begins until it can be (a restart would forget epoch " << epoch_
                   << ")";
  } else if (ok && !saved_) {
    RKV_LOG(INFO) << "wrote " << state_file_ << " again (epoch " << epoch_ << ")";
  }
  saved_ = ok;
}

proto::ClusterMap CoordinatorService::MapLocked() const {
  proto::ClusterMap map;
  map.set_epoch(epoch_);
  map.set_lease_ms(absl::ToInt64Milliseconds(lease_));
  const absl::Time now = MonotonicNow();
  for (const auto& [id, m] : members_) {
    proto::ServerInfo* s = map.add_servers();
    *s = m.info;
    s->set_last_heard_ms(absl::ToInt64Milliseconds(now - m.last_heard));
  }
  groups_.Save(&map);
  return map;
}

grpc::Status CoordinatorService::Register(grpc::ServerContext* ctx,
                                          const proto::RegisterRequest* req,
                                          proto::RegisterResponse* resp) {
  if (auto s = Authenticate(ctx, "Register"); !s.ok()) return s;
  if (auto s = ValidateId(req->id()); !s.ok()) return s;
  if (auto s = ValidateRegion(req->region()); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  Member& m = members_[req->id()];
  const bool known = m.info.id() == req->id();
  // The same memory as this server's registration we know (fenced, or its
  // region file reopened): what it held then, it holds now.
  const bool same_memory = known && req->previous_generation() != 0 &&
                           req->previous_generation() == m.info.region().generation();
  m.info.set_lineage(same_memory ? m.info.lineage() : req->region().generation());
  m.info.set_id(req->id());
  *m.info.mutable_region() = req->region();
  *m.info.mutable_stats() = req->stats();
  m.info.set_state(proto::SERVER_STATE_UP);
  m.last_heard = MonotonicNow();
  m.chunk_hashes.assign(req->chunk_hashes().begin(), req->chunk_hashes().end());
  ChangedLocked();
  RKV_LOG(INFO) << "server " << req->id() << (known ? " re-registered" : " joined") << " at "
                << req->region().endpoint().address() << " (" << req->region().endpoint().kind()
                << "), generation " << req->region().generation() << ", "
                << (req->region().length() >> 20) << " MiB; epoch " << epoch_;
  resp->set_lease_ms(absl::ToInt64Milliseconds(lease_));
  resp->set_epoch(epoch_);
  resp->set_replicas(groups_.replicas());
  resp->set_hurry(groups_.Reconfiguring(req->id()));
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* ctx,
                                           const proto::HeartbeatRequest* req,
                                           proto::HeartbeatResponse* resp) {
  if (auto s = Authenticate(ctx, "Heartbeat"); !s.ok()) return s;
  if (auto s = ValidateId(req->id()); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = members_.find(req->id());
  if (it == members_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown server: register first");
  }
  Member& m = it->second;
  if (m.info.region().generation() != req->generation()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("generation ", req->generation(), " is not the registered ",
                                     m.info.region().generation(), ": register again"));
  }
  m.last_heard = MonotonicNow();
  *m.info.mutable_stats() = req->stats();
  if (m.info.state() != proto::SERVER_STATE_UP && groups_.replicas() > 1) {
    // Its group went on without it: it must not serve a client that still
    // takes it for a member. It fences itself and registers anew.
    resp->set_lease_ms(absl::ToInt64Milliseconds(lease_));
    resp->set_fence(true);
    return grpc::Status::OK;
  }
  if (m.info.state() != proto::SERVER_STATE_UP) {
    m.info.set_state(proto::SERVER_STATE_UP);
    ChangedLocked();
    RKV_LOG(INFO) << "server " << req->id() << " is back up; epoch " << epoch_;
  }
  const std::map<std::string, ServerView> views = ViewsLocked();
  if (req->has_push() && groups_.OnProgress(req->id(), req->push(), views)) ChangedLocked();
  resp->set_lease_ms(absl::ToInt64Milliseconds(lease_));
  resp->set_fence(groups_.MustFence(req->id(), req->generation()));
  // From the moment the pusher is handed its push only its copy counts:
  // that must be in the state file first, or a restarted coordinator could
  // take a half-pushed target for a good copy. If the file cannot be
  // written, the group waits as it was (a push already under way goes on).
  if (groups_.PushPending(req->id(), views)) {
    ReplicaGroups before = groups_;
    groups_.BeginPush(req->id(), views);
    ChangedLocked();
    if (!saved_) groups_ = std::move(before);
  }
  if (std::optional<proto::PushOrder> order = groups_.PushFor(req->id(), views)) {
    for (proto::ServerInfo& t : *order->mutable_targets()) {
      Member& target = members_.at(t.id());
      t = target.info;
      // A fenced target registered since the reconfiguration began, with
      // the hashes of what it held then. They are handed out once: the
      // push changes what they describe, and a push started again (the
      // pusher fenced on its own, say) copies the target whole. (A live
      // copy's spare may have been written since it registered.)
      proto::ChunkHashes* h = order->add_target_hashes();
      if (!order->live()) {
        h->mutable_hashes()->Assign(target.chunk_hashes.begin(), target.chunk_hashes.end());
        target.chunk_hashes.clear();
      }
    }
    *resp->mutable_push() = *std::move(order);
  }
  resp->set_hurry(groups_.Reconfiguring(req->id()));
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Deregister(grpc::ServerContext* ctx,
                                            const proto::DeregisterRequest* req,
                                            proto::DeregisterResponse*) {
  if (auto s = Authenticate(ctx, "Deregister"); !s.ok()) return s;
  if (auto s = ValidateId(req->id()); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = members_.find(req->id());
  if (it == members_.end() || it->second.info.region().generation() != req->generation()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such server registration");
  }
  // Kept, marked down: its keys stay placed on it until it returns.
  it->second.info.set_state(proto::SERVER_STATE_DOWN);
  ChangedLocked();
  RKV_LOG(INFO) << "server " << req->id() << " left; epoch " << epoch_;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetClusterMap(grpc::ServerContext* ctx,
                                               const proto::GetClusterMapRequest*,
                                               proto::ClusterMap* resp) {
  if (auto s = Authenticate(ctx, "GetClusterMap"); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  *resp = MapLocked();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchClusterMap(grpc::ServerContext* ctx,
                                                 const proto::WatchClusterMapRequest* req,
                                                 grpc::ServerWriter<proto::ClusterMap>* writer) {
  if (auto s = Authenticate(ctx, "WatchClusterMap"); !s.ok()) return s;
  uint64_t sent = req->after_epoch();
  for (;;) {
    proto::ClusterMap map;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait_for(lock, std::chrono::milliseconds(200),
                        [&] { return stopping_ || epoch_ > sent; });
      if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator stopping");
      if (epoch_ <= sent) {
        if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
        continue;
      }
      map = MapLocked();
    }
    if (!writer->Write(map)) return grpc::Status::CANCELLED;
    sent = map.epoch();
  }
}

void CoordinatorService::LeaseLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    changed_.wait_for(lock, absl::ToChronoMilliseconds(lease_ / 4));
    if (!saved_) SaveLocked();
    const absl::Time now = MonotonicNow();
    for (auto& [id, m] : members_) {
      if (m.info.state() == proto::SERVER_STATE_UP && now - m.last_heard > lease_) {
        m.info.set_state(proto::SERVER_STATE_DOWN);
        ChangedLocked();
        RKV_LOG(WARNING) << "server " << id << " missed its lease ("
                         << absl::ToInt64Milliseconds(now - m.last_heard)
                         << " ms since last heard); marked down; epoch " << epoch_;
      }
    }
  }
}

}  // namespace rkv::server
