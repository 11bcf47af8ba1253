// A Session on a real server region in the deterministic simulation, for
// testing an operation's parts one round at a time: each Run posts one
// round and waits for it, as the client does, so a test decides exactly how
// the rounds of rival sessions interleave. Direct reads and writes of the
// region set the scene (a planted slot, a free-pool node) and check it.
#ifndef RKV_TESTS_CLIENT_PROTOCOL_PART_TEST_SESSION_H_
#define RKV_TESTS_CLIENT_PROTOCOL_PART_TEST_SESSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/protocol/op_rounds.h"
#include "client/session/session.h"
#include "common/fabric/fabric.h"
#include "tests/client/region/kv_test_env.h"

namespace rkv::testing {

class PartTestSession final : public client_internal::Session {
 public:
  // A session with `env`'s server (which must be in the simulation).
  static absl::StatusOr<std::unique_ptr<PartTestSession>> Create(
      KvTestEnv& env, uint64_t seed = 1, const client_internal::BrokenProtocol& broken = {});

  // Session.
  const layout::Layout& layout() const override { return layout_; }
  const ClientOptions& options() const override { return options_; }
  const client_internal::BrokenProtocol& broken() const override { return broken_; }
  absl::Time Now() const override;
  int replicas() const override { return 1; }
  uint64_t Remote(int, uint64_t off) const override { return region_.base + off; }
  uint32_t rkey(int) const override { return region_.rkey; }
  uint64_t region_id() const override { return 1; }
  uint32_t lkey() const override { return registered_->lkey(); }
  client_internal::ScratchArena& scratch() override { return *arena_; }
  client_internal::HeapAllocator& heap() override { return *heap_; }
  client_internal::SlotCache& cache() override { return cache_; }
  Rng& rng() override { return rng_; }

  // Posts the round `rounds` built and waits for its completion.
  absl::Status Run(client_internal::OpRounds& rounds);
  // Moves this session's clock on, as if the round trips took that long.
  void Advance(absl::Duration d) { skew_ += d; }

  // Direct access to the region, outside any operation.
  absl::StatusOr<uint64_t> ReadWord(uint64_t offset);
  absl::Status WriteWord(uint64_t offset, uint64_t word);
  absl::Status WriteBytes(uint64_t offset, absl::string_view bytes);
  // Every slot of the key's two combined buckets: (offset, word).
  absl::StatusOr<std::vector<std::pair<uint64_t, uint64_t>>> KeySlots(absl::string_view key);

 private:
  PartTestSession() : cache_(1 << 10), rng_(0) {}
  absl::Status RunRequests(std::vector<fabric::WorkRequest> wrs);

  std::shared_ptr<fabric::SimNetwork> sim_;
  std::unique_ptr<fabric::Fabric> fabric_;
  fabric::RemoteRegion region_;
  layout::Layout layout_;
  ClientOptions options_;
  client_internal::BrokenProtocol broken_;
  absl::Duration skew_;
  std::vector<uint8_t> memory_;
  std::unique_ptr<fabric::MemoryRegion> registered_;
  std::optional<client_internal::ScratchArena> arena_;
  std::optional<client_internal::HeapAllocator> heap_;
  client_internal::SlotCache cache_;
  Rng rng_;
  std::unique_ptr<fabric::QueuePair> qp_;
};

}  // namespace rkv::testing

#endif  // RKV_TESTS_CLIENT_PROTOCOL_PART_TEST_SESSION_H_
