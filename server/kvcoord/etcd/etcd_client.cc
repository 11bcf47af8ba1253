#include "server/kvcoord/etcd/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "etcd/mvcc/mvccpb/kv.pb.h"

namespace rkv::server::etcd {
namespace {

namespace pb = ::etcdserverpb;

// etcd's interceptors answer "etcdserver: no leader" at once, before the
// call reaches the store, when this is set and the member knows no leader;
// and they cancel a stream so marked once the member has had no leader for
// a few election timeouts. Without it a call waits out its deadline on a
// member cut off from the rest.
constexpr char kRequireLeaderKey[] = "hasleader";
constexpr char kRequireLeaderValue[] = "true";

// Between rounds in which every member failed at once (refused
// connections, no leader during an election): long enough not to spin,
// short next to an election.
constexpr absl::Duration kRoundPause = absl::Milliseconds(25);

std::chrono::system_clock::time_point ToChrono(absl::Time t) { return absl::ToChronoTime(t); }

absl::StatusOr<std::string> ReadFile(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::InvalidArgumentError(absl::StrCat("etcd ", what, " ", path, ": unreadable"));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(absl::StrCat("etcd ", what, " ", path, ": read failed"));
  }
  return contents.str();
}

std::string Describe(const grpc::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())), ": ",
                      s.error_message());
}

const char* StateName(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "idle";
    case GRPC_CHANNEL_CONNECTING:
      return "connecting";
    case GRPC_CHANNEL_READY:
      return "ready";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "failed to connect";
    case GRPC_CHANNEL_SHUTDOWN:
      return "shut down";
  }
  return "?";
}

// Connects the channel if it is idle and waits until it is ready; returns
// the state it is left in, READY or the one it failed in (at once on a
// failed connection, else by `deadline`). A call is made only on a ready
// channel, so when this is not READY nothing was sent, which is what lets
// a transaction move on to the next member.
grpc_connectivity_state WaitConnected(grpc::Channel& channel, absl::Time deadline) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE &&
         state != GRPC_CHANNEL_SHUTDOWN) {
    if (!channel.WaitForStateChange(state, ToChrono(deadline))) break;
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return state;
}

// What a failed call says about where the request got.
enum class Failure {
  // The member could not serve it (unreachable, slow, cut off from its
  // leader, mid-election); another member may. Said of a request that may
  // have reached the leader: retried only when that is harmless (reads).
  kMemberTransient,
  // Refused before it reached raft: no leader (etcd's interceptor, or raft
  // dropping the proposal), or gRPC found no connection to send it on.
  kNotSent,
  // Any other error: the same on every member (an invalid request).
  kFinal,
};

Failure Classify(const grpc::Status& s) {
  const std::string& msg = s.error_message();
  if (absl::StrContains(msg, "etcdserver: no leader") ||
      absl::StrContains(msg, "raft proposal dropped") ||
      (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
       absl::StrContains(msg, "failed to connect to all addresses"))) {
    return Failure::kNotSent;
  }
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      absl::StrContains(msg, "leader changed") || absl::StrContains(msg, "timed out")) {
    return Failure::kMemberTransient;
  }
  return Failure::kFinal;
}

KeyValue FromProto(const mvccpb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  return out;
}

struct Member {
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Maintenance::Stub> maintenance;
};

}  // namespace

struct EtcdClient::Impl {
  enum class Retry {
    // Reads: any failure that may be the member's alone moves on.
    kIdempotent,
    // Writes: only a failure that shows nothing was sent moves on.
    kIfNotSent,
  };
  using Call = std::function<grpc::Status(Member&, grpc::ClientContext&)>;

  Impl(const EtcdOptions& opts, const std::shared_ptr<grpc::ChannelCredentials>& credentials)
      : options(opts) {
    // After a member comes back, reconnect within a fraction of a second:
    // gRPC's default backoff grows to minutes. No keepalive pings: etcd's
    // default --grpc-keepalive-min-time (5 s) answers faster pings with
    // GOAWAY; calls have deadlines, and a watch probes its member.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    // Connections of this client's own: not shared with other clients of
    // the process, whose reconnect backoff they would otherwise share.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    for (const std::string& endpoint : options.endpoints) {
      Member m;
      m.endpoint = endpoint;
      m.channel = grpc::CreateCustomChannel(endpoint, credentials, args);
      m.kv = pb::KV::NewStub(m.channel);
      m.watch = pb::Watch::NewStub(m.channel);
      m.maintenance = pb::Maintenance::NewStub(m.channel);
      members.push_back(std::move(m));
    }
    keeper_ = std::thread([this] { KeepConnected(); });
  }

  ~Impl() {
    {
      // No watch may start on the queue once it is shut down.
      std::lock_guard<std::mutex> lock(keeper_mu_);
      keeper_stopping_ = true;
      keeper_cq_.Shutdown();
    }
    keeper_.join();
  }

  // Keeps every channel connecting until it is ready, and waits on their
  // state, which is what makes gRPC go on with a connection attempt: its
  // progress (the refusal, the handshake) is seen only by a thread that
  // polls, and without one only its backup poller does, every 5 s. So a
  // member that comes back is connected to again within the reconnect
  // backoff, not after 5 to 10 s, and a call never waits for a connection
  // that could have been made before.
  void KeepConnected() {
    for (size_t i = 0; i < members.size(); ++i) WatchState(i);
    void* tag = nullptr;
    bool ok = false;
    while (keeper_cq_.Next(&tag, &ok)) WatchState(reinterpret_cast<uintptr_t>(tag));
  }

  // Until the state changes or a short while passes (the while bounds how
  // long the destructor waits for the watches to end).
  void WatchState(size_t i) {
    std::lock_guard<std::mutex> lock(keeper_mu_);
    if (keeper_stopping_) return;
    grpc::Channel& channel = *members[i].channel;
    channel.NotifyOnStateChange(channel.GetState(/*try_to_connect=*/true),
                                ToChrono(absl::Now() + absl::Milliseconds(200)), &keeper_cq_,
                                reinterpret_cast<void*>(static_cast<uintptr_t>(i)));
  }

  size_t Next(size_t i) const { return (i + 1) % members.size(); }

  // Runs `call` on one member after another from the preferred one, each
  // try within call_timeout, until one answers, `retry` says an error is
  // final, or total_timeout has passed.
  absl::Status Run(const std::string& what, Retry retry, const Call& call) {
    // On the monotonic clock: a step of the wall clock must not stretch it.
    const absl::Time give_up = MonotonicNow() + options.total_timeout;
    const size_t n = members.size();
    std::vector<std::string> said(n, "not asked");
    size_t i = preferred.load(std::memory_order_relaxed);
    for (size_t tries = 0;; ++tries, i = Next(i)) {
      if (tries > 0 && tries % n == 0) {
        absl::SleepFor(std::min(kRoundPause, give_up - MonotonicNow()));
      }
      const absl::Time now = MonotonicNow();
      if (now >= give_up) break;
      Member& m = members[i];
      // gRPC's deadlines are on the wall clock.
      const absl::Time deadline = absl::Now() + std::min(options.call_timeout, give_up - now);
      if (const grpc_connectivity_state state = WaitConnected(*m.channel, deadline);
          state != GRPC_CHANNEL_READY) {
        said[i] = absl::StrCat("no connection (", StateName(state), ")");
        continue;
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(ToChrono(deadline));
      ctx.AddMetadata(kRequireLeaderKey, kRequireLeaderValue);
      const grpc::Status s = call(m, ctx);
      if (s.ok()) {
        preferred.store(i, std::memory_order_relaxed);
        return absl::OkStatus();
      }
      said[i] = Describe(s);
      const Failure failure = Classify(s);
      if (failure == Failure::kNotSent) continue;
      if (failure == Failure::kMemberTransient && retry == Retry::kIdempotent) continue;
      // The next call should not start on a member that just failed.
      if (failure != Failure::kFinal) preferred.store(Next(i), std::memory_order_relaxed);
      // An outcome unknown is always DEADLINE_EXCEEDED, so that a caller
      // tells it from UNAVAILABLE (surely not taken) by the code alone.
      const absl::StatusCode code = failure == Failure::kFinal
                                        ? static_cast<absl::StatusCode>(s.error_code())
                                        : absl::StatusCode::kDeadlineExceeded;
      return absl::Status(code,
                          absl::StrCat("etcd ", what, " at ", m.endpoint, ": ", s.error_message(),
                                       failure == Failure::kFinal ? "" : " (outcome unknown)"));
    }
    preferred.store(i, std::memory_order_relaxed);
    std::vector<std::string> members_said;
    for (size_t j = 0; j < n; ++j) {
      members_said.push_back(absl::StrCat(members[j].endpoint, ": ", said[j]));
    }
    return absl::UnavailableError(absl::StrCat("etcd ", what, ": no member answered within ",
                                               absl::FormatDuration(options.total_timeout), " (",
                                               absl::StrJoin(members_said, "; "), ")"));
  }

  absl::StatusOr<std::optional<KeyValue>> Get(const std::string& key, int64_t* revision) {
    pb::RangeRequest request;
    request.set_key(key);
    pb::RangeResponse response;
    absl::Status s = Run(absl::StrCat("Get ", key), Retry::kIdempotent,
                         [&](Member& m, grpc::ClientContext& ctx) {
                           response.Clear();
                           return m.kv->Range(&ctx, request, &response);
                         });
    if (!s.ok()) return s;
    if (revision != nullptr) *revision = response.header().revision();
    if (response.kvs_size() == 0) return std::optional<KeyValue>();
    return std::optional<KeyValue>(FromProto(response.kvs(0)));
  }

  const EtcdOptions options;
  std::vector<Member> members;
  // The member that answered last: the next call starts there.
  std::atomic<size_t> preferred{0};

 private:
  std::mutex keeper_mu_;
  bool keeper_stopping_ = false;  // Guarded by keeper_mu_.
  grpc::CompletionQueue keeper_cq_;
  std::thread keeper_;
};

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {}
EtcdClient::~EtcdClient() = default;

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoints");
  for (const std::string& e : options.endpoints) {
    if (e.empty()) return absl::InvalidArgumentError("etcd: an empty endpoint");
  }
  if (options.call_timeout <= absl::ZeroDuration() ||
      options.total_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("etcd: call_timeout and total_timeout must be positive");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.ca_file.empty() && options.cert_file.empty() && options.key_file.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    if (options.cert_file.empty() != options.key_file.empty()) {
      return absl::InvalidArgumentError("etcd: cert_file and key_file go together");
    }
    grpc::SslCredentialsOptions ssl;
    // Without a CA file gRPC trusts the system's roots.
    if (!options.ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadFile("ca_file", options.ca_file);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *std::move(ca);
    }
    if (!options.cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadFile("cert_file", options.cert_file);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadFile("key_file", options.key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    credentials = grpc::SslCredentials(ssl);
  }
  auto client = absl::WrapUnique(new EtcdClient(std::move(options)));
  client->impl_ = std::make_shared<Impl>(client->options_, credentials);
  return client;
}

absl::StatusOr<std::optional<KeyValue>> EtcdClient::Get(const std::string& key, int64_t* revision) {
  return impl_->Get(key, revision);
}

absl::StatusOr<TxnResult> EtcdClient::Txn(
    const std::vector<Compare>& compares,
    const std::vector<std::pair<std::string, std::string>>& puts,
    const std::vector<std::string>& deletes) {
  pb::TxnRequest request;
  for (const Compare& c : compares) {
    pb::Compare* out = request.add_compare();
    out->set_key(c.key);
    out->set_result(pb::Compare::EQUAL);
    switch (c.target) {
      case Compare::Target::kModRevision:
        out->set_target(pb::Compare::MOD);
        out->set_mod_revision(c.revision);
        break;
      case Compare::Target::kCreateRevision:
        out->set_target(pb::Compare::CREATE);
        out->set_create_revision(c.revision);
        break;
      case Compare::Target::kValue:
        out->set_target(pb::Compare::VALUE);
        out->set_value(c.value);
        break;
    }
  }
  for (const auto& [key, value] : puts) {
    pb::PutRequest* put = request.add_success()->mutable_request_put();
    put->set_key(key);
    put->set_value(value);
  }
  for (const std::string& key : deletes) {
    request.add_success()->mutable_request_delete_range()->set_key(key);
  }
  pb::TxnResponse response;
  absl::Status s =
      impl_->Run("Txn", Impl::Retry::kIfNotSent, [&](Member& m, grpc::ClientContext& ctx) {
        response.Clear();
        return m.kv->Txn(&ctx, request, &response);
      });
  if (!s.ok()) return s;
  TxnResult result;
  result.succeeded = response.succeeded();
  result.revision = response.header().revision();
  return result;
}

std::vector<MemberStatus> EtcdClient::Status() {
  struct Pending {
    grpc::ClientContext ctx;
    pb::StatusResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<pb::StatusResponse>> call;
  };
  const size_t n = impl_->members.size();
  const absl::Time deadline = absl::Now() + options_.call_timeout;
  grpc::CompletionQueue cq;
  std::vector<Pending> pending(n);
  const pb::StatusRequest request;
  for (size_t i = 0; i < n; ++i) {
    Pending& p = pending[i];
    p.ctx.set_deadline(ToChrono(deadline));
    p.call = impl_->members[i].maintenance->AsyncStatus(&p.ctx, request, &cq);
    p.call->Finish(&p.response, &p.status, reinterpret_cast<void*>(i));
  }
  // Every call ends by its deadline, so this loop does too.
  for (size_t left = n; left > 0; --left) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) break;
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }

  std::vector<MemberStatus> out(n);
  for (size_t i = 0; i < n; ++i) {
    const Pending& p = pending[i];
    MemberStatus& m = out[i];
    m.endpoint = impl_->members[i].endpoint;
    if (!p.status.ok()) {
      m.status =
          absl::Status(static_cast<absl::StatusCode>(p.status.error_code()),
                       absl::StrCat("etcd status at ", m.endpoint, ": ", p.status.error_message()));
      continue;
    }
    m.member_id = p.response.header().member_id();
    m.leader_id = p.response.leader();
    m.raft_term = p.response.raftterm();
    m.db_size = p.response.dbsize();
  }
  return out;
}

// The watch's reader thread follows one stream at a time; its prober
// thread asks the stream's member for its status every call_timeout and
// cancels the stream when that fails, which is how a member that hangs
// (its process stopped, its host gone without closing connections) is
// left within about two call_timeouts.
struct StreamWatch::Impl {
  using Callback = std::function<void(const std::optional<KeyValue>&, int64_t)>;

  Impl(std::shared_ptr<EtcdClient::Impl> client, std::string key, int64_t from, Callback on_change)
      : client_(std::move(client)),
        key_(std::move(key)),
        next_revision_(from),
        on_change_(std::move(on_change)) {
    reader_ = std::thread([this] { Read(); });
    prober_ = std::thread([this] { Probe(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
      if (probe_ctx_ != nullptr) probe_ctx_->TryCancel();
    }
    cv_.notify_all();
    reader_.join();
    prober_.join();
  }

 private:
  bool Stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stopping_;
  }

  // How a stream ended.
  enum class Ended {
    kNotServed,  // The member did not create the watch: unreachable, no leader.
    kBroken,     // It did, then the stream broke or the member stopped answering.
    kCompacted,  // It said the revisions to go on from are compacted.
  };

  void Read() {
    const size_t n = client_->members.size();
    size_t member = client_->preferred.load(std::memory_order_relaxed);
    size_t failed_in_a_row = 0;
    while (!Stopping()) {
      const Ended ended = Follow(member);
      if (Stopping()) break;
      // After a compaction the member is fine: go on from the new revision
      // there.
      if (ended == Ended::kCompacted) continue;
      member = client_->Next(member);
      failed_in_a_row = ended == Ended::kBroken ? 0 : failed_in_a_row + 1;
      // A whole round of members that would not serve: pause before the
      // next, so that an outage is not a busy loop.
      if (failed_in_a_row > 0 && failed_in_a_row % n == 0) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_; });
      }
    }
  }

  // Opens a stream on `member` from next_revision_ and delivers what it
  // brings until it ends.
  Ended Follow(size_t member) {
    Member& m = client_->members[member];
    grpc::ClientContext ctx;
    ctx.AddMetadata(kRequireLeaderKey, kRequireLeaderValue);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return Ended::kNotServed;
      stream_ctx_ = &ctx;
      stream_member_ = member;
      ++stream_number_;
    }
    std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> stream =
        m.watch->Watch(&ctx);
    pb::WatchRequest request;
    pb::WatchCreateRequest* create = request.mutable_create_request();
    create->set_key(key_);
    create->set_start_revision(next_revision_);
    bool created = false;
    bool compacted = false;
    // Set when this side ends a stream that is still open.
    std::string ended_by;
    if (stream->Write(request)) {
      pb::WatchResponse response;
      while (stream->Read(&response)) {
        if (response.compact_revision() != 0) {
          RKV_LOG(INFO) << "etcd watch of " << key_ << ": revision " << next_revision_
                        << " is compacted (at " << response.compact_revision()
                        << "); reading the key as it is";
          compacted = true;
          ended_by = "compacted";
          CatchUpAfterCompaction();
          break;
        }
        if (response.canceled()) {
          // Refused (a create that is canceled at once) is not served.
          if (response.created()) created = false;
          ended_by = absl::StrCat("canceled: ", response.cancel_reason());
          break;
        }
        if (response.created()) created = true;
        if (response.created() && next_revision_ == 0) {
          // "From now": from here on, a new stream goes on from this
          // member's now, not from the next member's.
          next_revision_ = response.header().revision() + 1;
        }
        for (const mvccpb::Event& event : response.events()) Deliver(event);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stream_ctx_ = nullptr;
    }
    // Ended here: cancel it, or Finish would wait for the server to end it.
    // Either way the reads are drained before Finish, as gRPC asks.
    if (!ended_by.empty()) ctx.TryCancel();
    pb::WatchResponse ignored;
    while (stream->Read(&ignored)) {
    }
    const grpc::Status s = stream->Finish();
    if (compacted) return Ended::kCompacted;
    if (ended_by.empty()) ended_by = Describe(s);
    if (created && !Stopping()) {
      RKV_LOG(WARNING) << "etcd watch of " << key_ << " at " << m.endpoint << " ended (" << ended_by
                       << "); going on from revision " << next_revision_ << " at the next member";
    }
    return created ? Ended::kBroken : Ended::kNotServed;
  }

  void Deliver(const mvccpb::Event& event) {
    const int64_t revision = event.kv().mod_revision();
    // A new stream starts at next_revision_; this only guards against a
    // member that sends what was asked not to be sent.
    if (revision < next_revision_) return;
    next_revision_ = revision + 1;
    if (event.type() == mvccpb::Event::DELETE) {
      last_was_delete_ = true;
      on_change_(std::nullopt, revision);
    } else {
      last_was_delete_ = false;
      on_change_(FromProto(event.kv()), revision);
    }
  }

  // The revisions from next_revision_ on are gone: delivers the key as it
  // is now (unless that is what was delivered last), and goes on from the
  // revision it was read at. If it cannot be read, the next stream finds
  // the compaction again and tries again.
  void CatchUpAfterCompaction() {
    int64_t revision = 0;
    absl::StatusOr<std::optional<KeyValue>> kv = client_->Get(key_, &revision);
    if (!kv.ok()) {
      RKV_LOG(WARNING) << "etcd watch of " << key_ << ": " << kv.status();
      return;
    }
    if (kv->has_value()) {
      const int64_t mod_revision = (*kv)->mod_revision;
      if (mod_revision >= next_revision_) {
        last_was_delete_ = false;
        on_change_(*kv, mod_revision);
      }
    } else if (!last_was_delete_) {
      last_was_delete_ = true;
      on_change_(std::nullopt, revision);
    }
    next_revision_ = std::max(next_revision_, revision + 1);
  }

  void Probe() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, absl::ToChronoMilliseconds(client_->options.call_timeout),
                   [this] { return stopping_; });
      if (stopping_ || stream_ctx_ == nullptr) continue;
      const size_t member = stream_member_;
      const uint64_t stream = stream_number_;
      grpc::ClientContext ctx;
      ctx.set_deadline(ToChrono(absl::Now() + client_->options.call_timeout));
      probe_ctx_ = &ctx;
      lock.unlock();
      pb::StatusResponse response;
      const grpc::Status s =
          client_->members[member].maintenance->Status(&ctx, pb::StatusRequest(), &response);
      lock.lock();
      probe_ctx_ = nullptr;
      if (!s.ok() && !stopping_ && stream_ctx_ != nullptr && stream_number_ == stream) {
        RKV_LOG(WARNING) << "etcd watch of " << key_ << ": " << client_->members[member].endpoint
                         << " does not answer status calls (" << Describe(s)
                         << "); leaving its stream";
        stream_ctx_->TryCancel();
      }
    }
  }

  const std::shared_ptr<EtcdClient::Impl> client_;
  const std::string key_;
  // Touched by the reader thread only.
  int64_t next_revision_;
  bool last_was_delete_ = false;
  const Callback on_change_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                      // Guarded by mu_.
  grpc::ClientContext* stream_ctx_ = nullptr;  // Guarded by mu_.
  size_t stream_member_ = 0;                   // Guarded by mu_.
  uint64_t stream_number_ = 0;                 // Guarded by mu_.
  grpc::ClientContext* probe_ctx_ = nullptr;   // Guarded by mu_.

  std::thread reader_;
  std::thread prober_;
};

StreamWatch::StreamWatch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamWatch::~StreamWatch() = default;

std::unique_ptr<Watch> EtcdClient::WatchKey(const std::string& key, int64_t from,
                                            WatchCallback on_change) {
  return absl::WrapUnique(
      new StreamWatch(std::make_unique<StreamWatch::Impl>(impl_, key, from, std::move(on_change))));
}

}  // namespace rkv::server::etcd
