#include "client/op_rounds.h"

namespace rkv::client_internal {

using fabric::WorkRequest;

void OpRounds::Reset() {
  requests_.clear();
  posted_at_ = absl::Time();
  posted_cas_ = false;
  costs_ = OpCosts();
}

void OpRounds::AddRead(uint64_t off, void* local, uint32_t len) {
  requests_.push_back(WorkRequest::Read(0, local, len, s_.lkey(), s_.Remote(off), s_.rkey()));
}

void OpRounds::AddWrite(uint64_t off, const void* local, uint32_t len) {
  requests_.push_back(WorkRequest::Write(0, local, len, s_.lkey(), s_.Remote(off), s_.rkey()));
}

void OpRounds::AddCas(uint64_t off, uint64_t* result, uint64_t expected, uint64_t desired) {
  posted_cas_ = true;
  requests_.push_back(
      WorkRequest::Cas(0, result, s_.lkey(), s_.Remote(off), s_.rkey(), expected, desired));
}

void OpRounds::AddFaa(uint64_t off, uint64_t* result, uint64_t add) {
  requests_.push_back(WorkRequest::Faa(0, result, s_.lkey(), s_.Remote(off), s_.rkey(), add));
}

void OpRounds::OnPosted(absl::Time at) {
  posted_at_ = at;
  costs_.round_trips++;
  costs_.requests += requests_.size();
  for (const WorkRequest& wr : requests_) costs_.bytes += wr.length;
}

}  // namespace rkv::client_internal
