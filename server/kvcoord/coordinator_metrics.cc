#include "server/kvcoord/coordinator_metrics.h"

#include <cstdint>
#include <map>

#include "absl/strings/ascii.h"
#include "common/prometheus_text.h"

namespace rkv::server {
namespace {

// A gauge family of `items` counted by state, every state of the enum
// present (0 when none), so that a query over time finds every series:
// labels as kvctl status shows states ("SERVER_STATE_UP": "up").
template <typename Item>
void CountByState(PrometheusText& m, absl::string_view name, absl::string_view help,
                  const google::protobuf::EnumDescriptor& states,
                  const google::protobuf::RepeatedPtrField<Item>& items) {
  const auto label = [&states](int value) -> std::string {
    const google::protobuf::EnumValueDescriptor* v = states.FindValueByNumber(value);
    if (v == nullptr) return "unknown";  // A newer coordinator's state.
    return absl::AsciiStrToLower(v->name().substr(v->name().find("_STATE_") + 7));
  };
  std::map<std::string, uint64_t> counts;
  for (int i = 0; i < states.value_count(); ++i) {
    if (states.value(i)->number() != 0) counts[label(states.value(i)->number())] = 0;
  }
  for (const Item& item : items) counts[label(item.state())]++;
  m.Family(name, "gauge", help);
  for (const auto& [state, n] : counts) m.Sample(n, {{"state", state}});
}

}  // namespace

std::string RenderCoordinatorMetrics(const Coordinator::Snapshot& snap) {
  PrometheusText m;
  m.Single("rkv_coordinator_leading", "gauge",
           "1 while this kvcoord leads (renews leases and orders reconfigurations).",
           uint64_t{snap.leading ? 1u : 0u});
  m.Single("rkv_coordinator_map_epoch", "gauge",
           "The cluster map's epoch: it grows with every stored change.", snap.map.epoch());
  CountByState(m, "rkv_coordinator_servers", "kvservers in the cluster map, by state.",
               *proto::ServerState_descriptor(), snap.map.servers());
  CountByState(m, "rkv_coordinator_groups", "Replica groups, by state.",
               *proto::GroupState_descriptor(), snap.map.groups());
  m.Single("rkv_coordinator_state_writes_total", "counter",
           "Changes of the cluster's state this kvcoord stored (etcd, or its state file).",
           snap.commits);
  m.Single("rkv_coordinator_state_write_failures_total", "counter",
           "Changes the store refused (undone): etcd without a quorum, a full disk.",
           snap.commit_failures);
  m.Single("rkv_coordinator_reconfigurations_total", "counter",
           "Replica groups that began to reconfigure while this kvcoord led.",
           snap.reconfigurations);
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
