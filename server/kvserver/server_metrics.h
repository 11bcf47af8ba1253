// What kvserver serves at /metrics (kvserver --metrics_listen): the
// region's usage as last counted (what kvctl status shows), the membership
// agent's counters, and what the fabric's listener served clients, in the
// Prometheus text format.
#ifndef RKV_SERVER_KVSERVER_SERVER_METRICS_H_
#define RKV_SERVER_KVSERVER_SERVER_METRICS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "common/fabric/types.h"
#include "rkvpb/coordinator.pb.h"
#include "server/kvserver/member_agent.h"

namespace rkv::server {

// `fabric_kind` (FabricKindName: "soft" or "verbs") labels the fabric's
// series, which say nothing of requests on verbs.
std::string RenderServerMetrics(const proto::RegionStats& stats,
                                const MemberAgent::Counters& counters,
                                const fabric::ListenerCounters& served,
                                absl::string_view fabric_kind);

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_SERVER_METRICS_H_
