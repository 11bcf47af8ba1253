#include "client/protocol/op_rounds.h"

namespace rkv::client_internal {

using fabric::WorkRequest;

void OpRounds::Reset() {
  Clear();
  posted_at_ = absl::Time();
  posted_cas_ = false;
  costs_ = OpCosts();
}

void OpRounds::Add(const WorkRequest& wr, int replica) {
  requests_.push_back(wr);
  targets_.push_back(static_cast<uint8_t>(replica));
}

void OpRounds::AddRead(uint64_t off, void* local, uint32_t len, int r) {
  Add(WorkRequest::Read(0, local, len, s_.lkey(), s_.Remote(r, off), s_.rkey(r)), r);
}

void OpRounds::AddWrite(uint64_t off, const void* local, uint32_t len, int r) {
  Add(WorkRequest::Write(0, local, len, s_.lkey(), s_.Remote(r, off), s_.rkey(r)), r);
}

void OpRounds::AddWriteTo(uint64_t remote_addr, uint32_t rkey, const void* local, uint32_t len,
                          int r) {
  Add(WorkRequest::Write(0, local, len, s_.lkey(), remote_addr, rkey), r);
}

void OpRounds::AddReadFrom(uint64_t remote_addr, uint32_t rkey, void* local, uint32_t len, int r) {
  Add(WorkRequest::Read(0, local, len, s_.lkey(), remote_addr, rkey), r);
}

void OpRounds::AddFaaTo(uint64_t remote_addr, uint32_t rkey, uint64_t* result, uint64_t add,
                        int r) {
  Add(WorkRequest::Faa(0, result, s_.lkey(), remote_addr, rkey, add), r);
}

void OpRounds::AddCas(uint64_t off, uint64_t* result, uint64_t expected, uint64_t desired, int r) {
  posted_cas_ = true;
  Add(WorkRequest::Cas(0, result, s_.lkey(), s_.Remote(r, off), s_.rkey(r), expected, desired), r);
}

void OpRounds::AddFaa(uint64_t off, uint64_t* result, uint64_t add, int r) {
  Add(WorkRequest::Faa(0, result, s_.lkey(), s_.Remote(r, off), s_.rkey(r), add), r);
}

void OpRounds::OnPosted(absl::Time at) {
  posted_at_ = at;
  costs_.round_trips++;
  costs_.requests += requests_.size();
  for (const WorkRequest& wr : requests_) costs_.bytes += wr.length;
}

}  // namespace rkv::client_internal
