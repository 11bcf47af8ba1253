#include "tests/client/protocol/part_test_session.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rkv::testing {

using client_internal::OpRounds;
using fabric::WorkRequest;

absl::StatusOr<std::unique_ptr<PartTestSession>> PartTestSession::Create(
    KvTestEnv& env, uint64_t seed, const client_internal::BrokenProtocol& broken) {
  if (env.sim == nullptr) return absl::InvalidArgumentError("not a simulated environment");
  std::unique_ptr<PartTestSession> s(new PartTestSession());
  s->sim_ = env.sim;
  s->fabric_ = env.sim->NewFabric();
  s->region_ = env.server->address();
  s->layout_ = env.server->layout();
  s->options_ = env.client_options();
  s->broken_ = broken;
  s->rng_ = Rng(seed);
  s->memory_.resize(s->options_.scratch_bytes);
  RKV_ASSIGN_OR_RETURN(
      s->registered_,
      s->fabric_->RegisterMemory(s->memory_.data(), s->memory_.size(), fabric::kLocalWrite));
  s->arena_.emplace(s->memory_.data(), s->memory_.size());
  s->heap_.emplace(s->layout_, s->options_.heap_chunk_bytes, s->options_.grace_period);
  RKV_ASSIGN_OR_RETURN(s->qp_, s->fabric_->Connect(s->region_.endpoint));
  return s;
}

absl::Time PartTestSession::Now() const {
  // Simulated time, as the environment's clients keep it, plus the skew.
  return absl::UnixEpoch() + absl::Microseconds(sim_->steps()) + skew_;
}

absl::Status PartTestSession::RunRequests(std::vector<WorkRequest> wrs) {
  if (wrs.empty()) return absl::InvalidArgumentError("an empty round");
  for (size_t k = 0; k < wrs.size(); ++k) {
    wrs[k].wr_id = k;
    wrs[k].flags &= ~fabric::kSignaled;
  }
  wrs.back().flags |= fabric::kSignaled;
  RKV_RETURN_IF_ERROR(qp_->Post(wrs));
  fabric::Completion c;
  if (qp_->Wait({&c, 1}, absl::Seconds(10)) != 1) {
    return absl::DeadlineExceededError("no completion");
  }
  if (c.status != fabric::CompletionStatus::kSuccess) {
    return absl::UnavailableError(fabric::CompletionStatusName(c.status));
  }
  return absl::OkStatus();
}

absl::Status PartTestSession::Run(OpRounds& rounds) {
  rounds.OnPosted(Now());
  std::vector<WorkRequest> wrs = rounds.requests();
  rounds.Clear();
  return RunRequests(std::move(wrs));
}

absl::StatusOr<uint64_t> PartTestSession::ReadWord(uint64_t offset) {
  uint8_t* buf = arena_->Allocate(8);
  absl::Status s = RunRequests({WorkRequest::Read(0, buf, 8, lkey(), Remote(0, offset), rkey(0))});
  uint64_t word;
  std::memcpy(&word, buf, 8);
  arena_->Free(buf);
  if (!s.ok()) return s;
  return word;
}

absl::Status PartTestSession::WriteWord(uint64_t offset, uint64_t word) {
  return WriteBytes(offset, absl::string_view(reinterpret_cast<const char*>(&word), 8));
}

absl::Status PartTestSession::WriteBytes(uint64_t offset, absl::string_view bytes) {
  uint8_t* buf = arena_->Allocate(bytes.size());
  std::memcpy(buf, bytes.data(), bytes.size());
  absl::Status s = RunRequests({WorkRequest::Write(0, buf, static_cast<uint32_t>(bytes.size()),
                                                   lkey(), Remote(0, offset), rkey(0))});
  arena_->Free(buf);
  return s;
}

absl::StatusOr<std::vector<std::pair<uint64_t, uint64_t>>> PartTestSession::KeySlots(
    absl::string_view key) {
  const layout::KeyPlacement p = layout::PlaceKey(key, layout_.groups);
  std::vector<std::pair<uint64_t, uint64_t>> slots;
  for (int b = 0; b < 2; ++b) {
    const uint64_t bucket = layout::CombinedBucketOffset(layout_, p.group[b], p.side[b]);
    for (uint32_t i = 0; i < layout::kSlotsPerCombinedBucket; ++i) {
      const uint64_t off = layout::SlotOffset(bucket, i);
      bool seen = false;
      for (const auto& [o, w] : slots) seen |= o == off;
      if (seen) continue;
      RKV_ASSIGN_OR_RETURN(uint64_t word, ReadWord(off));
      slots.emplace_back(off, word);
    }
  }
  return slots;
}

}  // namespace rkv::testing
