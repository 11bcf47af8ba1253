// `kvctl wait`'s conditions, and the judging of one against one reading of
// the cluster (cluster_status.h). Scripts wait on these instead of polling
// `kvctl status --json` and picking fields out of it; the judging is a pure
// function of the reading, so that each condition's edges are tested
// without a cluster (tests/kvctl/wait_condition_test.cc).
//
//   serving [--groups=N] [--copies=R]   N groups (default: every group the
//                                       map has, and one at least) serve
//                                       with R copies (default: the map's
//                                       replicas), and none reconfigures
//   server ID --state=up|down           the map lists server ID so
//   leader [ID]                         some coordinator (or coordinator ID)
//                                       leads
//   coordinator ID [--role=R[,R...]]    coordinator ID's role is one of
//                                       those (leader, standby, starting,
//                                       unreachable; default leader,standby:
//                                       it has joined)
//
// A coordinator is named by its id (kvcoord --id) or its address as listed.
#ifndef RKV_CLIENT_KVCTL_WAIT_CONDITION_H_
#define RKV_CLIENT_KVCTL_WAIT_CONDITION_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/kvctl/cluster_status.h"

namespace rkv::kvctl {

struct WaitCondition {
  enum class Kind { kServing, kServer, kLeader, kCoordinator };
  Kind kind = Kind::kServing;
  // kServing: 0 means every group of the map (one at least).
  int groups = 0;
  // kServing: 0 means the map's replicas.
  int copies = 0;
  // kServer and kCoordinator; kLeader: empty means any coordinator.
  std::string id;
  // kServer: states; kCoordinator: roles. The condition holds on any one.
  std::set<std::string> accepted;
  // The condition as given, for messages: "server s2 --state=down".
  std::string text;
};

// The wait flags as given on the command line; empty: not given.
struct WaitFlags {
  std::string groups;
  std::string copies;
  std::string state;
  std::string role;
};

// `args`: the words after `wait` ("server", "s2"). InvalidArgument, saying
// what is wrong, for an unknown condition, a missing or extra word, a flag
// the condition does not take, or a bad value.
absl::StatusOr<WaitCondition> ParseWaitCondition(const std::vector<std::string>& args,
                                                 const WaitFlags& flags);

// --timeout: a duration such as 30s, 500ms or 2m, not negative.
absl::StatusOr<absl::Duration> ParseWaitTimeout(absl::string_view text);

struct Verdict {
  bool holds = false;
  // What the reading showed of the condition, for people: printed when it
  // holds, and as what was last seen when the wait times out. For leader
  // and coordinator, when it holds, the first two words are the
  // coordinator's id and its address.
  std::string seen;
};

Verdict Judge(const WaitCondition& condition, const ClusterStatus& status);

}  // namespace rkv::kvctl

#endif  // RKV_CLIENT_KVCTL_WAIT_CONDITION_H_
