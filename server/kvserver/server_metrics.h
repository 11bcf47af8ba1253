// What kvserver serves at /metrics (kvserver --metrics_listen): the
// region's usage as last counted (what kvctl status shows) and the
// membership agent's counters, in the Prometheus text format.
#ifndef RKV_SERVER_KVSERVER_SERVER_METRICS_H_
#define RKV_SERVER_KVSERVER_SERVER_METRICS_H_

#include <string>

#include "rkvpb/coordinator.pb.h"
#include "server/kvserver/member_agent.h"

namespace rkv::server {

std::string RenderServerMetrics(const proto::RegionStats& stats,
                                const MemberAgent::Counters& counters);

}  // namespace rkv::server

#endif  // RKV_SERVER_KVSERVER_SERVER_METRICS_H_
