#include "coordinator_stub.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/monotonic_clock.h"

namespace rkv {
namespace {

bool Retryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseCoordinatorList(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view a : absl::StrSplit(list, ',')) {
    if (a.empty() || a.find(':') == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "coordinator list '", list, "': want host:port, or several separated by commas"));
    }
    if (std::find(out.begin(), out.end(), a) != out.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator list '", list, "' names ", a, " twice"));
    }
    out.emplace_back(a);
  }
  return out;
}

CoordinatorStub::CoordinatorStub(const std::string& addresses, std::string token)
    : token_(std::move(token)) {
  absl::StatusOr<std::vector<std::string>> list = ParseCoordinatorList(addresses);
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& a : list.ok() ? *list : std::vector<std::string>{addresses}) {
    IndexLocked(a);
  }
}

size_t CoordinatorStub::IndexLocked(const std::string& address) {
  for (size_t i = 0; i < addresses_.size(); ++i) {
    if (addresses_[i] == address) return i;
  }
  // After a coordinator restart, reconnect within a fraction of a lease:
  // gRPC's default backoff grows to minutes, and a server of a replicated
  // cluster that fenced itself meanwhile waits for it to register again.
  // (Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: that is also the shortest time
  // a connection attempt is given, 20 s by default.)
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  addresses_.push_back(address);
  stubs_.push_back(proto::Coordinator::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  return addresses_.size() - 1;
}

void CoordinatorStub::Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const {
  if (!token_.empty()) ctx->AddMetadata("rkv-token", token_);
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

proto::Coordinator::Stub& CoordinatorStub::stub() {
  std::lock_guard<std::mutex> lock(mu_);
  return *stubs_[current_];
}

proto::Coordinator::Stub& CoordinatorStub::stub_at(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  return *stubs_[i];
}

void CoordinatorStub::Next() {
  std::lock_guard<std::mutex> lock(mu_);
  current_ = (current_ + 1) % stubs_.size();
}

std::string CoordinatorStub::address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return addresses_[current_];
}

std::vector<std::string> CoordinatorStub::addresses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return addresses_;
}

grpc::Status CoordinatorStub::Call(absl::Duration timeout, absl::Duration per_try, const Rpc& rpc) {
  // On the monotonic clock: a server's fence deadline bounds `timeout`,
  // and a step of the wall clock must not stretch it.
  const absl::Time deadline = MonotonicNow() + timeout;
  size_t i;
  {
    std::lock_guard<std::mutex> lock(mu_);
    i = current_;
  }
  size_t tried = 0;
  // Those that did not answer in time: a standby may still name one as the
  // leader (until it takes over from it), and is not followed there.
  std::vector<bool> silent;
  grpc::Status last(grpc::StatusCode::DEADLINE_EXCEEDED, "no coordinator tried");
  for (;;) {
    const absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) return last;
    grpc::ClientContext ctx;
    Prepare(&ctx, std::min(per_try, left));
    grpc::Status s = rpc(stub_at(i), ctx);
    std::unique_lock<std::mutex> lock(mu_);
    if (s.ok()) {
      current_ = i;
      return s;
    }
    last = grpc::Status(s.error_code(),
                        absl::StrCat("coordinator ", addresses_[i], ": ", s.error_message()));
    if (!Retryable(s)) {
      current_ = i;
      return last;
    }
    silent.resize(stubs_.size());
    silent[i] = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    size_t next = (i + 1) % stubs_.size();
    auto hint = ctx.GetServerTrailingMetadata().find("rkv-leader");
    if (hint != ctx.GetServerTrailingMetadata().end()) {
      const size_t leader = IndexLocked(std::string(hint->second.data(), hint->second.size()));
      silent.resize(stubs_.size());
      if (leader != i && !silent[leader]) next = leader;
    }
    i = next;
    const bool round = ++tried % stubs_.size() == 0;
    lock.unlock();
    // Every one tried: a leader may be about to take over; not a busy loop.
    if (round) absl::SleepFor(std::min(absl::Milliseconds(20), deadline - MonotonicNow()));
  }
}

absl::Status CoordinatorStub::GetClusterMap(proto::ClusterMap* map, absl::Duration timeout) {
  grpc::Status s = Call(timeout, std::min(timeout, absl::Seconds(1)),
                        [map](proto::Coordinator::Stub& stub, grpc::ClientContext& ctx) {
                          return stub.GetClusterMap(&ctx, proto::GetClusterMapRequest(), map);
                        });
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

}  // namespace rkv
