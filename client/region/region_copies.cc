#include "client/region/region_copies.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/protocol/kv_operation.h"
#include "common/status.h"

namespace rkv::client_internal {

RegionCopies::RegionCopies(const std::vector<fabric::RemoteRegion>& regions,
                           ClientResources& resources)
    : resources_(resources) {
  for (const fabric::RemoteRegion& r : regions) copies_.push_back({r, nullptr});
}

absl::Status RegionCopies::Connect(uint32_t max_outstanding, uint64_t peer_id) {
  fabric::QueuePairOptions qo;
  qo.peer_id = peer_id;
  // Every operation's round, the free-pool push's (a WRITE and a CAS), the
  // lease renewal's (a WRITE and the census header's READ) and the census
  // report's (words and an ack).
  qo.max_send_wr = std::max<uint32_t>(512, max_outstanding * KvOperation::kMaxRoundRequests + 6);
  qo.channel = resources_.channel();
  std::vector<std::unique_ptr<fabric::QueuePair>> qps;
  for (const Copy& c : copies_) {
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<fabric::QueuePair> qp,
                         resources_.fabric().Connect(c.region.endpoint, qo));
    if (qp->limits().max_send_wr < qo.max_send_wr) {
      return absl::FailedPreconditionError(
          absl::StrCat("the fabric grants a send queue of ", qp->limits().max_send_wr,
                       " requests; ", max_outstanding, " operations in flight need ",
                       qo.max_send_wr, " (lower max_outstanding)"));
    }
    qps.push_back(std::move(qp));
  }
  for (size_t i = 0; i < copies_.size(); ++i) copies_[i].qp = std::move(qps[i]);
  return absl::OkStatus();
}

void RegionCopies::Disconnect() {
  past_counters_ = counters();
  for (Copy& c : copies_) c.qp.reset();
}

fabric::QueuePairCounters RegionCopies::counters() const {
  fabric::QueuePairCounters total = past_counters_;
  for (const Copy& c : copies_) {
    if (c.qp != nullptr) total += c.qp->counters();
  }
  return total;
}

absl::StatusOr<layout::Layout> RegionCopies::ReadLayout() {
  RKV_ASSIGN_OR_RETURN(layout::Layout primary, ReadHeader(0));
  for (int r = 1; r < size(); ++r) {
    RKV_ASSIGN_OR_RETURN(const layout::Layout other, ReadHeader(r));
    if (!layout::SameGeometry(primary, other)) {
      return absl::FailedPreconditionError(
          absl::StrCat("replica ", r, " (", copies_[r].region.endpoint.address,
                       ") has another region geometry than the primary's"));
    }
    // Copies configured apart: the longest grace period is safe for all.
    primary.grace_us = std::max(primary.grace_us, other.grace_us);
  }
  return primary;
}

absl::StatusOr<layout::Layout> RegionCopies::ReadHeader(int r) {
  const uint32_t n = layout::HeaderOffsets::kHeaderFieldsEnd;
  uint8_t* header = resources_.scratch().Allocate(n);
  if (header == nullptr) return absl::ResourceExhaustedError("scratch memory");
  const fabric::RemoteRegion& region = copies_[r].region;
  absl::Status read = RunSync(
      {fabric::WorkRequest::Read(0, header, n, resources_.lkey(), region.base, region.rkey)}, r);
  absl::StatusOr<layout::Layout> parsed =
      read.ok()
          ? layout::ParseHeader(absl::string_view(reinterpret_cast<char*>(header), n),
                                region.length)
          : absl::UnavailableError(absl::StrCat("reading the region header: ", read.message()));
  resources_.scratch().Free(header);
  if (parsed.ok()) copies_[r].header = *parsed;
  return parsed;
}

absl::Status RegionCopies::RunSync(std::vector<fabric::WorkRequest> wrs, int r) {
  fabric::QueuePair& qp = *copies_[r].qp;
  for (fabric::WorkRequest& wr : wrs) wr.flags = 0;
  wrs.back().flags = fabric::kSignaled;
  RKV_RETURN_IF_ERROR(qp.Post(wrs));
  fabric::Completion c;
  if (qp.Wait({&c, 1}, absl::Seconds(10)) != 1) {
    return absl::DeadlineExceededError("no completion from the server in 10 s");
  }
  if (c.status != fabric::CompletionStatus::kSuccess) {
    return absl::UnavailableError(fabric::CompletionStatusName(c.status));
  }
  return absl::OkStatus();
}

}  // namespace rkv::client_internal
