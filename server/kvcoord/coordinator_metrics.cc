#include "server/kvcoord/coordinator_metrics.h"

#include <cstdint>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "common/prometheus_text.h"

namespace rkv::server {
namespace {

// "SERVER_STATE_UP" -> "up": a label value as kvctl status shows it.
std::string StateLabel(const std::string& name, absl::string_view prefix) {
  return absl::AsciiStrToLower(absl::StripPrefix(name, prefix));
}

}  // namespace

std::string RenderCoordinatorMetrics(const CoordinatorService::Snapshot& snap) {
  PrometheusText m;
  m.Family("rkv_coordinator_leading", "gauge",
           "1 while this kvcoord leads (renews leases and orders reconfigurations).");
  m.Sample(uint64_t{snap.leading ? 1u : 0u});
  m.Family("rkv_coordinator_map_epoch", "gauge",
           "The cluster map's epoch: it grows with every stored change.");
  m.Sample(snap.map.epoch());
  // Every state appears, 0 when no server or group is in it, so that a
  // query over time sees a series that was always there.
  std::map<std::string, uint64_t> servers;
  for (int v = proto::ServerState_MIN + 1; v <= proto::ServerState_MAX; ++v) {
    servers[StateLabel(proto::ServerState_Name(v), "SERVER_STATE_")] = 0;
  }
  for (const proto::ServerInfo& s : snap.map.servers()) {
    servers[StateLabel(proto::ServerState_Name(s.state()), "SERVER_STATE_")]++;
  }
  m.Family("rkv_coordinator_servers", "gauge", "kvservers in the cluster map, by state.");
  for (const auto& [state, n] : servers) m.Sample(n, {{"state", state}});
  std::map<std::string, uint64_t> groups;
  for (int v = proto::GroupState_MIN + 1; v <= proto::GroupState_MAX; ++v) {
    groups[StateLabel(proto::GroupState_Name(v), "GROUP_STATE_")] = 0;
  }
  for (const proto::ReplicaGroup& g : snap.map.groups()) {
    groups[StateLabel(proto::GroupState_Name(g.state()), "GROUP_STATE_")]++;
  }
  m.Family("rkv_coordinator_groups", "gauge", "Replica groups, by state.");
  for (const auto& [state, n] : groups) m.Sample(n, {{"state", state}});
  m.Family("rkv_coordinator_state_writes_total", "counter",
           "Changes of the cluster's state this kvcoord stored (etcd, or its state file).");
  m.Sample(snap.commits);
  m.Family("rkv_coordinator_state_write_failures_total", "counter",
           "Changes the store refused (undone): etcd without a quorum, a full disk.");
  m.Sample(snap.commit_failures);
  m.Family("rkv_coordinator_reconfigurations_total", "counter",
           "Replica groups that began to reconfigure while this kvcoord led.");
  m.Sample(snap.reconfigurations);
  m.Histogram("rkv_coordinator_reconfiguration_duration_seconds",
              "From a group's reconfiguration to its serving again (fences, settle, push); "
              "its keys wait meanwhile.",
              snap.reconfiguration_seconds);
  m.Histogram("rkv_coordinator_live_copy_duration_seconds",
              "From the start of a live copy to a spare until it ended (joined, or given up); "
              "the group serves meanwhile.",
              snap.live_copy_seconds);
  return m.text();
}

}  // namespace rkv::server
