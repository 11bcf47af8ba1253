#include "tests/common/fabric/fabric_test_env.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "tests/common/fabric/verbs_test_setup.h"

namespace rkv::fabric::testing {

AlignedBuffer::AlignedBuffer(size_t size) : size_(size) {
  const size_t rounded = (size + 4095) / 4096 * 4096;
  data_ = static_cast<uint8_t*>(std::aligned_alloc(4096, rounded));
  std::memset(data_, 0, rounded);
}

std::string BackendName(Backend b) {
  switch (b) {
    case Backend::kSoftTcp:
      return "soft_tcp";
    case Backend::kSoftTcpBusyPoll:
      return "soft_tcp_busy_poll";
    case Backend::kSoftSim:
      return "soft_sim";
    case Backend::kVerbs:
      return "verbs";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<FabricTestEnv>> FabricTestEnv::Create(Backend backend,
                                                                     const EnvOptions& options) {
  auto env = std::make_unique<FabricTestEnv>();
  env->backend = backend;
  FabricOptions fo;
  std::string address = "127.0.0.1:0";
  std::string initiator_device;
  switch (backend) {
    case Backend::kSoftTcp:
      fo.kind = FabricKind::kSoft;
      break;
    case Backend::kSoftTcpBusyPoll:
      fo.kind = FabricKind::kSoft;
      fo.soft_busy_poll = absl::Microseconds(50);
      break;
    case Backend::kSoftSim:
      fo.kind = FabricKind::kSoft;
      env->sim = std::make_shared<SimNetwork>(options.sim_seed, options.sim);
      address = "target";
      break;
    case Backend::kVerbs: {
      RKV_ASSIGN_OR_RETURN(VerbsTestSetup setup, VerbsTestSetupFromEnv());
      fo.kind = FabricKind::kVerbs;
      fo.rdma_device = setup.target_device;
      initiator_device = setup.initiator_device;
      address = setup.address;
      break;
    }
  }
  if (env->sim != nullptr) {
    env->target = env->sim->NewFabric();
    env->initiator = env->sim->NewFabric();
  } else {
    RKV_ASSIGN_OR_RETURN(env->target, OpenFabric(fo));
    FabricOptions init = fo;
    init.rdma_device = initiator_device;
    RKV_ASSIGN_OR_RETURN(env->initiator, OpenFabric(init));
  }
  if (options.initiator_faults.any()) {
    env->initiator = InjectFaults(std::move(env->initiator), options.initiator_faults);
  }
  if (options.target_faults.any()) {
    env->target = InjectFaults(std::move(env->target), options.target_faults);
  }
  env->remote_mem = std::make_unique<AlignedBuffer>(options.remote_bytes);
  env->local_mem = std::make_unique<AlignedBuffer>(options.local_bytes);
  RKV_ASSIGN_OR_RETURN(
      env->remote,
      env->target->RegisterMemory(env->remote_mem->data(), env->remote_mem->size(), kAllAccess));
  RKV_ASSIGN_OR_RETURN(
      env->local,
      env->initiator->RegisterMemory(env->local_mem->data(), env->local_mem->size(), kLocalWrite));
  RKV_ASSIGN_OR_RETURN(env->listener,
                       env->target->Listen({address, options.token, options.soft_threads}));
  return env;
}

absl::StatusOr<std::unique_ptr<QueuePair>> FabricTestEnv::Connect(const QueuePairOptions& options) {
  return initiator->Connect(listener->endpoint(), options);
}

absl::StatusOr<std::unique_ptr<QueuePair>> FabricTestEnv::ConnectAs(uint64_t peer_id,
                                                                    QueuePairOptions options) {
  options.peer_id = peer_id;
  return Connect(options);
}

std::vector<Completion> FabricTestEnv::Await(QueuePair& qp, size_t expected,
                                             absl::Duration timeout) {
  std::vector<Completion> got;
  const absl::Time deadline = absl::Now() + timeout;
  Completion buf[64];
  while (got.size() < expected) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() && backend != Backend::kSoftSim) break;
    const size_t n = qp.Wait(absl::MakeSpan(buf), std::max(left, absl::ZeroDuration()));
    if (n == 0 && backend == Backend::kSoftSim) break;  // The simulation ran dry.
    got.insert(got.end(), buf, buf + n);
  }
  return got;
}

std::vector<Completion> FabricTestEnv::Run(QueuePair& qp, const std::vector<WorkRequest>& batch,
                                           size_t expected) {
  absl::Status s = qp.Post(batch);
  if (!s.ok()) return {};
  return Await(qp, expected);
}

WorkRequest FabricTestEnv::Read(uint64_t id, uint64_t offset, uint8_t* buf, uint32_t len) const {
  return WorkRequest::Read(id, buf, len, local->lkey(), remote->remote_base() + offset,
                           remote->rkey());
}

WorkRequest FabricTestEnv::Write(uint64_t id, uint64_t offset, const uint8_t* buf,
                                 uint32_t len) const {
  return WorkRequest::Write(id, buf, len, local->lkey(), remote->remote_base() + offset,
                            remote->rkey());
}

WorkRequest FabricTestEnv::Cas(uint64_t id, uint64_t offset, uint64_t* old, uint64_t expect,
                               uint64_t desired) const {
  return WorkRequest::Cas(id, old, local->lkey(), remote->remote_base() + offset, remote->rkey(),
                          expect, desired);
}

WorkRequest FabricTestEnv::Faa(uint64_t id, uint64_t offset, uint64_t* old, uint64_t add) const {
  return WorkRequest::Faa(id, old, local->lkey(), remote->remote_base() + offset, remote->rkey(),
                          add);
}

absl::StatusOr<uint64_t> FabricTestEnv::ReadWord(uint64_t offset) {
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<QueuePair> qp, Connect());
  // The last 8 bytes of the local region are reserved for this.
  auto* slot = reinterpret_cast<uint64_t*>(local_mem->data() + local_mem->size() - 8);
  std::vector<Completion> c = Run(*qp, {Read(0, offset, reinterpret_cast<uint8_t*>(slot), 8)}, 1);
  if (c.size() != 1 || c[0].status != CompletionStatus::kSuccess) {
    return absl::InternalError("ReadWord: READ did not complete");
  }
  return *slot;
}

}  // namespace rkv::fabric::testing
