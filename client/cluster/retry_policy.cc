#include "client/cluster/retry_policy.h"

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/protocol/outcome.h"

namespace rkv::client_internal {

bool MayRetry(const ClusterOp& op, const absl::Status& failure) {
  return absl::IsUnavailable(failure) && !op.retried &&
         (op.type == OpType::kGet || !OutcomeUnknown(failure));
}

absl::Status Serves(const Group& g) {
  if (g.info.members_size() == 1 && g.info.members(0) == g.info.id()) {
    // One copy per key: the group is its server.
    if (g.info.state() == proto::GROUP_STATE_SERVING && !g.members.empty() &&
        g.members[0].state() == proto::SERVER_STATE_UP) {
      return absl::OkStatus();
    }
    return absl::UnavailableError(
        absl::StrCat("server ", g.info.id(), ", which holds this key, is down"));
  }
  // (A reconfiguring group's operations wait for it, and are not judged
  // here: ClusterClient::Dispatch.)
  if (g.info.state() == proto::GROUP_STATE_SERVING &&
      g.members.size() == static_cast<size_t>(g.info.members_size())) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat("group ", g.info.id(),
                                             ", which holds this key, has no copy up (servers ",
                                             absl::StrJoin(g.info.members(), ","), ")"));
}

absl::Status StillReconfiguring(absl::string_view group_id, absl::Duration lease) {
  return absl::UnavailableError(
      absl::StrCat("group ", group_id, ", which holds this key, is still reconfiguring after ",
                   absl::FormatDuration(ParkingLimit(lease))));
}

}  // namespace rkv::client_internal
