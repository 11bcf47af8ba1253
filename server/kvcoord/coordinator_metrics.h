// What kvcoord serves at /metrics (kvcoord --metrics_listen): servers and
// replica groups by state, the map's epoch, whether it leads, and the
// changes of the state it stored, in the Prometheus text format.
#ifndef RKV_SERVER_KVCOORD_COORDINATOR_METRICS_H_
#define RKV_SERVER_KVCOORD_COORDINATOR_METRICS_H_

#include <string>

#include "server/kvcoord/coordinator.h"

namespace rkv::server {

std::string RenderCoordinatorMetrics(const Coordinator::Snapshot& snapshot);

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_COORDINATOR_METRICS_H_
