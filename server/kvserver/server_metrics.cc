#include "server/kvserver/server_metrics.h"

#include <algorithm>

#include "common/prometheus_text.h"

namespace rkv::server {

std::string RenderServerMetrics(const proto::RegionStats& s, const MemberAgent::Counters& c,
                                const fabric::ListenerCounters& f, absl::string_view fabric_kind) {
  PrometheusText m;
  m.Single("rkv_server_index_slots", "gauge", "Slots of the region's hash index.", s.slots_total());
  m.Single("rkv_server_index_slots_used", "gauge", "Slots of the index that name a record.",
           s.slots_used());
  m.Single("rkv_server_index_load_factor", "gauge", "Slots used over slots (RACE fills to ~0.9).",
           s.slots_total() == 0
               ? 0.0
               : static_cast<double>(s.slots_used()) / static_cast<double>(s.slots_total()));
  // The heap, by what holds each byte; the four add up to its size. The
  // pool may be counted in part (see rkv_server_heap_pool_counted_in_part):
  // then pooled is a floor and held a ceiling.
  const uint64_t used = std::min(s.heap_used(), s.heap_bytes());
  const uint64_t live = std::min(s.heap_live(), used);
  const uint64_t pooled = std::min(s.heap_pooled(), used - live);
  m.Family("rkv_server_heap_bytes", "gauge",
           "The region's heap by state: live (records name it), pooled (the free pool), held "
           "(clients hold it), unallocated (never handed out).");
  m.Sample(live, {{"state", "live"}});
  m.Sample(pooled, {{"state", "pooled"}});
  m.Sample(used - live - pooled, {{"state", "held"}});
  m.Sample(s.heap_bytes() - used, {{"state", "unallocated"}});
  m.Single("rkv_server_heap_pool_counted_in_part", "gauge",
           "1 when the last count walked only part of the free pool.",
           uint64_t{s.heap_pool_partial() ? 1u : 0u});
  m.Single("rkv_server_client_sessions", "gauge", "Client sessions holding a lease here.",
           uint64_t{s.client_sessions()});
  m.Single("rkv_server_client_sessions_fenced_total", "counter",
           "Client sessions fenced: their connections closed, or their lease lapsed.",
           s.client_sessions_fenced());
  m.Single("rkv_server_heap_reclaimed_bytes_total", "counter",
           "Heap that fenced client sessions held, back in the free pool (the heap census).",
           s.heap_reclaimed());
  m.Single("rkv_server_lease_renewals_total", "counter",
           "Heartbeats to the coordinator that renewed this server's lease.", c.renewals);
  m.Single("rkv_server_lease_renewal_failures_total", "counter",
           "Heartbeats or registrations that failed (the coordinator unreachable or refusing).",
           c.renewal_failures);
  m.Single("rkv_server_fences_total", "counter",
           "Fences of this server's region (a new rkey): reconfigurations and lost leases.",
           c.fences);
  // Pushes this server made as a replica group's primary: in a
  // reconfiguration (the group paused), or a live copy to a spare.
  const char* kinds[] = {"reconfiguration", "live_copy"};
  m.Family("rkv_server_pushes_total", "counter",
           "Pushes of this server's region to other members, by kind and outcome.");
  for (int k = 0; k < 2; ++k) {
    m.Sample(c.pushes[k][0], {{"kind", kinds[k]}, {"outcome", "done"}});
    m.Sample(c.pushes[k][1], {{"kind", kinds[k]}, {"outcome", "failed"}});
  }
  m.Family("rkv_server_push_bytes_total", "counter",
           "Bytes the pushes brought to agree (sent, or found equal), by kind.");
  for (int k = 0; k < 2; ++k) m.Sample(c.push_bytes[k], {{"kind", kinds[k]}});
  m.Family("rkv_server_push_progress_bytes", "gauge",
           "The push under way: bytes done, and its size (0 when none).");
  m.Sample(c.push_copied_now, {{"of", "done"}});
  m.Sample(c.push_size_now, {{"of", "size"}});
  // The fabric's listener: the clients' (and pushing peers') queue pairs,
  // and the one-sided requests executed for them. The target's CPU sees
  // those only on the soft fabric; a verbs NIC serves them unseen.
  const std::string kind(fabric_kind);
  m.Family("rkv_server_fabric_connections", "gauge",
           "Queue pairs of clients and peers open at this server's fabric listener.");
  m.Sample(f.connections, {{"fabric", kind}});
  m.Family("rkv_server_fabric_connections_accepted_total", "counter",
           "Queue pairs this server's fabric listener accepted.");
  m.Sample(f.connections_accepted, {{"fabric", kind}});
  m.Family("rkv_server_fabric_requests_served_total", "counter",
           "One-sided requests executed here for peers, by operation: served by the soft "
           "fabric; 0 on verbs, whose NIC serves requests without the CPU.");
  m.Sample(f.reads, {{"fabric", kind}, {"op", "read"}});
  m.Sample(f.writes, {{"fabric", kind}, {"op", "write"}});
  m.Sample(f.compare_and_swaps, {{"fabric", kind}, {"op", "cas"}});
  m.Sample(f.fetch_and_adds, {{"fabric", kind}, {"op", "faa"}});
  m.Family("rkv_server_fabric_bytes_served_total", "counter",
           "Payload bytes of the requests served: READ bytes sent back, WRITE bytes landed; "
           "served by the soft fabric; 0 on verbs, whose NIC serves requests without the CPU.");
  m.Sample(f.read_bytes, {{"fabric", kind}, {"op", "read"}});
  m.Sample(f.write_bytes, {{"fabric", kind}, {"op", "write"}});
  return m.text();
}

}  // namespace rkv::server
