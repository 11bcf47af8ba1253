// kvctl: look at and poke an rkv cluster.
//
//   kvctl status [--json]      coordinators (which leads), etcd's health, servers,
//                              their state, region and usage, map epoch
//   kvctl get KEY              prints the value (exit 1 if absent)
//   kvctl put KEY VALUE
//   kvctl del KEY
//   kvctl wait CONDITION [--timeout=30s]
//                              until the condition holds (exit 0) or the
//                              time is up (exit 1, saying what was last
//                              seen): serving groups, a server up or down,
//                              a coordinator leading or joined
//                              (wait_condition.h)
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cluster/cluster_client.h"
#include "client/kvctl/cluster_status.h"
#include "client/kvctl/wait_condition.h"
#include "common/cluster_token.h"
#include "common/fabric/fabric_flags.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "proto/coordinator_stub.h"
#include "rkv/client.h"

ABSL_FLAG(std::string, coordinator, rkv::kDefaultCoordinator,
          "Every kvcoord's address, comma-separated (scripts/cluster.sh runs them here); "
          "kvctl follows the one that leads.");
ABSL_FLAG(bool, json, false, "status: print one JSON object.");
ABSL_FLAG(std::string, timeout, "30s", "wait: give up after this long (30s, 500ms, 2m).");
ABSL_FLAG(std::string, groups, "",
          "wait serving: this many groups at least (default: every group of the map).");
ABSL_FLAG(std::string, copies, "",
          "wait serving: with this many copies each (default: the map's replicas).");
ABSL_FLAG(std::string, state, "", "wait server: up or down.");
ABSL_FLAG(std::string, role, "",
          "wait coordinator: leader, standby, starting or unreachable, comma-separated "
          "(default: leader,standby).");

namespace {

using rkv::kvctl::ClusterStatus;
using rkv::kvctl::CoordinatorReading;
using rkv::kvctl::CoordinatorRole;
using rkv::kvctl::GroupStateName;
using rkv::kvctl::MapReplicas;
using rkv::kvctl::ReadClusterStatus;
using rkv::kvctl::ServerStateName;

constexpr char kUsage[] =
    "kvctl: inspect and use an rkv cluster.\n"
    "Usage:\n"
    "  kvctl status [--json]\n"
    "  kvctl get KEY\n"
    "  kvctl put KEY VALUE\n"
    "  kvctl del KEY\n"
    "  kvctl wait serving [--groups=N] [--copies=R]   N groups serve with R copies, none\n"
    "                                                 reconfiguring\n"
    "  kvctl wait server ID --state=up|down\n"
    "  kvctl wait leader [ID]                         a coordinator (or ID) leads\n"
    "  kvctl wait coordinator ID [--role=leader,standby,starting,unreachable]\n"
    "    each until it holds (exit 0) or --timeout (default 30s) passes (exit 1)\n"
    "(kvbench measures and verifies workloads.)\n"
    "Common flags: --coordinator=HOST:PORT[,HOST:PORT...] --token=T|--token_file=F "
    "--fabric=auto|verbs|soft";

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out;
}

// Heap handed out and neither live nor in the free pool: what clients hold.
uint64_t HeapHeld(const rkv::proto::RegionStats& st) {
  const uint64_t accounted = st.heap_live() + st.heap_pooled();
  return st.heap_used() > accounted ? st.heap_used() - accounted : 0;
}

// Bytes in MiB, with a decimal below 10.
std::string Mib(uint64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  return mib < 10 ? absl::StrFormat("%.1f", mib) : absl::StrFormat("%.0f", mib);
}

// The control plane: who leads, and the health of etcd's members as the
// leader (or else any coordinator) sees them.
void PrintControlPlane(const std::vector<CoordinatorReading>& coordinators, bool json) {
  const rkv::proto::CoordinatorStatus* seer = nullptr;
  for (const auto& r : coordinators) {
    if (!r.status.address().empty() && (seer == nullptr || r.status.leading())) seer = &r.status;
  }
  if (json) {
    std::cout << "\"coordinators\": [";
    for (size_t i = 0; i < coordinators.size(); ++i) {
      const auto& c = coordinators[i].status;
      std::cout << (i ? ", " : "") << "{\"address\": \"" << JsonEscape(coordinators[i].address)
                << "\", \"id\": \"" << JsonEscape(c.id()) << "\", \"role\": \""
                << CoordinatorRole(c) << "\", \"term\": " << c.term() << "}";
    }
    std::cout << "], \"store\": \"" << (seer ? seer->store() : "") << "\", \"etcd\": [";
    for (int i = 0; seer != nullptr && i < seer->store_members_size(); ++i) {
      const auto& m = seer->store_members(i);
      std::cout << (i ? ", " : "") << "{\"endpoint\": \"" << JsonEscape(m.endpoint())
                << "\", \"healthy\": " << (m.healthy() ? "true" : "false")
                << ", \"leader\": " << (m.leader() ? "true" : "false") << "}";
    }
    std::cout << "], ";
    return;
  }
  std::vector<std::string> lines;
  for (const auto& [address, c] : coordinators) {
    lines.push_back(c.address().empty()
                        ? absl::StrCat(address, " unreachable")
                        : absl::StrCat(c.id(), " ", address, " ",
                                       c.leading() ? absl::StrCat("leader (term ", c.term(), ")")
                                                   : std::string(CoordinatorRole(c))));
  }
  std::cout << "coordinators: " << absl::StrJoin(lines, ", ") << "\n";
  if (seer == nullptr) return;
  if (seer->store() != "etcd") {
    std::cout << "state: " << seer->store() << " (one coordinator process)\n";
    return;
  }
  int healthy = 0;
  std::string leader = "none";
  std::vector<std::string> bad;
  for (const auto& m : seer->store_members()) {
    healthy += m.healthy();
    if (m.leader()) leader = m.endpoint();
    if (!m.healthy()) bad.push_back(absl::StrCat(m.endpoint(), ": ", m.error()));
  }
  std::cout << absl::StrFormat("state: etcd, %d/%d members healthy, leader %s%s\n", healthy,
                               seer->store_members_size(), leader,
                               bad.empty() ? "" : " (" + absl::StrJoin(bad, "; ") + ")");
}

int Status(const std::string& coordinator, const std::string& token) {
  const ClusterStatus status = ReadClusterStatus(coordinator, token, absl::Seconds(2));
  if (!status.map_read.ok()) {
    std::cerr << "kvctl: " << status.map_read.message() << "\n";
    return 1;
  }
  const rkv::proto::ClusterMap& map = status.map;
  const bool json = absl::GetFlag(FLAGS_json);
  if (json) std::cout << "{";
  PrintControlPlane(status.coordinators, json);
  if (!json) std::cout << "\n";
  if (json) {
    std::cout << "\"epoch\": " << map.epoch() << ", \"lease_ms\": " << map.lease_ms()
              << ", \"servers\": [";
    for (int i = 0; i < map.servers_size(); ++i) {
      const auto& s = map.servers(i);
      std::cout << (i ? ", " : "") << "{\"id\": \"" << JsonEscape(s.id()) << "\", \"state\": \""
                << ServerStateName(s.state()) << "\", \"fabric\": \""
                << s.region().endpoint().kind() << "\", \"address\": \""
                << JsonEscape(s.region().endpoint().address())
                << "\", \"region_bytes\": " << s.region().length()
                << ", \"generation\": " << s.region().generation()
                << ", \"slots_total\": " << s.stats().slots_total()
                << ", \"slots_used\": " << s.stats().slots_used()
                << ", \"heap_bytes\": " << s.stats().heap_bytes()
                << ", \"heap_used\": " << s.stats().heap_used()
                << ", \"heap_live\": " << s.stats().heap_live()
                << ", \"heap_pooled\": " << s.stats().heap_pooled()
                << ", \"heap_held\": " << HeapHeld(s.stats())
                << ", \"heap_pool_partial\": " << (s.stats().heap_pool_partial() ? "true" : "false")
                << ", \"client_sessions\": " << s.stats().client_sessions()
                << ", \"client_sessions_fenced\": " << s.stats().client_sessions_fenced()
                << ", \"heap_reclaimed\": " << s.stats().heap_reclaimed()
                << ", \"last_heard_ms\": " << s.last_heard_ms() << "}";
    }
    std::cout << "], \"replicas\": " << MapReplicas(map) << ", \"groups\": [";
    for (int i = 0; i < map.groups_size(); ++i) {
      const auto& g = map.groups(i);
      std::cout << (i ? ", " : "") << "{\"id\": \"" << JsonEscape(g.id()) << "\", \"state\": \""
                << GroupStateName(g.state()) << "\", \"copies\": " << g.members_size()
                << ", \"config\": " << g.config() << ", \"members\": [";
      for (int m = 0; m < g.members_size(); ++m) {
        std::cout << (m ? ", " : "") << "\"" << JsonEscape(g.members(m)) << "\"";
      }
      std::cout << "], \"copying\": [";
      for (int m = 0; m < g.copying_size(); ++m) {
        std::cout << (m ? ", " : "") << "\"" << JsonEscape(g.copying(m)) << "\"";
      }
      std::cout << "], \"copied_bytes\": " << g.copied_bytes()
                << ", \"copy_bytes\": " << g.copy_bytes() << "}";
    }
    std::cout << "]}\n";
    return 0;
  }
  std::cout << absl::StrFormat("cluster map epoch %d, lease %d ms, %d servers\n\n", map.epoch(),
                               map.lease_ms(), map.servers_size());
  // The heap, in MiB: blocks slots name, free (the pool and what the
  // cursor has not handed out), and what clients hold (chunks, blocks in
  // their grace period, or what crashed ones left behind). Clients take
  // heap from a group's primary alone, so a backup's free and held heap
  // mean nothing; a pool counted in part makes free a floor ("+") and held
  // a ceiling ("<").
  std::set<std::string> backups;
  for (const auto& g : map.groups()) {
    for (int m = 1; m < g.members_size(); ++m) backups.insert(g.members(m));
  }
  // CLIENTS: sessions holding a lease, and in parentheses those fenced
  // since the server started (their lease lapsed: crashed or paused).
  std::cout << absl::StrFormat("%-12s %-5s %-6s %-22s %8s %19s %23s %11s %10s\n", "ID", "STATE",
                               "FABRIC", "ADDRESS", "REGION", "SLOTS USED", "HEAP LIVE/FREE/HELD",
                               "CLIENTS", "LAST SEEN");
  for (const auto& s : map.servers()) {
    const auto& st = s.stats();
    const uint64_t free_bytes =
        st.heap_pooled() + (st.heap_bytes() - std::min(st.heap_used(), st.heap_bytes()));
    const std::string heap =
        backups.contains(s.id())
            ? absl::StrCat(Mib(st.heap_live()), "/-/- MiB")
            : absl::StrCat(Mib(st.heap_live()), "/", Mib(free_bytes),
                           st.heap_pool_partial() ? "+/<" : "/", Mib(HeapHeld(st)), " MiB");
    const std::string clients =
        st.client_sessions_fenced() == 0
            ? absl::StrCat(st.client_sessions())
            : absl::StrCat(st.client_sessions(), " (", st.client_sessions_fenced(), " fenced)");
    std::cout << absl::StrFormat(
        "%-12s %-5s %-6s %-22s %8s %19s %23s %11s %8dms\n", s.id(), ServerStateName(s.state()),
        s.region().endpoint().kind(), s.region().endpoint().address(),
        absl::StrCat(s.region().length() >> 20, " MiB"),
        absl::StrCat(st.slots_used(), "/", st.slots_total()), heap, clients, s.last_heard_ms());
  }
  const uint32_t replicas = MapReplicas(map);
  if (replicas == 1) return 0;
  // Replica groups: each key lives on one group, in `replicas` copies.
  std::cout << absl::StrFormat("\n%d copies of every key; %d replica groups\n\n", replicas,
                               map.groups_size());
  std::cout << absl::StrFormat("%-8s %-14s %6s  %-30s %s\n", "GROUP", "STATE", "CONFIG",
                               "MEMBERS (PRIMARY FIRST)", "COPY");
  for (const auto& g : map.groups()) {
    std::string copy;
    const std::string progress =
        g.copy_bytes() == 0
            ? ""
            : absl::StrFormat("%d/%d MiB (%d%%)", g.copied_bytes() >> 20, g.copy_bytes() >> 20,
                              100 * g.copied_bytes() / g.copy_bytes());
    if (g.state() == rkv::proto::GROUP_STATE_RECONFIGURING) {
      copy = progress.empty() ? "fencing" : progress;
      if (!g.joining().empty())
        absl::StrAppend(&copy, ", joining: ", absl::StrJoin(g.joining(), ","));
    } else if (!g.copying().empty()) {
      copy = absl::StrCat("copying ", absl::StrJoin(g.copying(), ","), " in while serving",
                          progress.empty() ? "" : ": " + progress);
    } else if (g.members_size() < static_cast<int>(replicas)) {
      copy =
          absl::StrCat(g.members_size(), " of ", replicas, " copies: waiting for a spare server");
    }
    std::cout << absl::StrFormat("%-8s %-14s %6d  %-30s %s\n", g.id(), GroupStateName(g.state()),
                                 g.config(), absl::StrJoin(g.members(), ","), copy);
  }
  return 0;
}

// Readings of the cluster until the condition holds or the timeout passes,
// a short pause between them. A reading makes its calls one after another
// (each coordinator's Describe, then up to two map reads), so each is given
// its share of the time left: a paused coordinator, which holds a call
// until its timeout, cannot carry a reading far past the deadline.
int Wait(const std::string& coordinator, const std::string& token,
         const std::vector<std::string>& words) {
  const rkv::kvctl::WaitFlags flags{absl::GetFlag(FLAGS_groups), absl::GetFlag(FLAGS_copies),
                                    absl::GetFlag(FLAGS_state), absl::GetFlag(FLAGS_role)};
  absl::StatusOr<rkv::kvctl::WaitCondition> condition =
      rkv::kvctl::ParseWaitCondition(words, flags);
  absl::StatusOr<absl::Duration> timeout =
      rkv::kvctl::ParseWaitTimeout(absl::GetFlag(FLAGS_timeout));
  if (!condition.ok() || !timeout.ok()) {
    const absl::Status bad = condition.ok() ? timeout.status() : condition.status();
    std::cerr << "kvctl: " << bad.message() << "\n" << kUsage << "\n";
    return 2;
  }
  constexpr absl::Duration kInterval = absl::Milliseconds(100);
  const absl::StatusOr<std::vector<std::string>> listed = rkv::ParseCoordinatorList(coordinator);
  const int calls = (listed.ok() ? static_cast<int>(listed->size()) : 1) + 2;
  const absl::Time deadline = rkv::MonotonicNow() + *timeout;
  while (true) {
    // At least a moment for each call, should the time be up already.
    const absl::Duration rpc_timeout =
        std::clamp((deadline - rkv::MonotonicNow()) / calls, kInterval, absl::Seconds(2));
    const rkv::kvctl::Verdict verdict =
        rkv::kvctl::Judge(*condition, ReadClusterStatus(coordinator, token, rpc_timeout));
    if (verdict.holds) {
      std::cout << verdict.seen << "\n";
      return 0;
    }
    const absl::Duration left = deadline - rkv::MonotonicNow();
    if (left <= absl::ZeroDuration()) {
      std::cerr << "kvctl: wait " << condition->text << ": not so after "
                << absl::FormatDuration(*timeout) << "; last seen: " << verdict.seen << "\n";
      return 1;
    }
    absl::SleepFor(std::min(left, kInterval));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = rkv::ParseFlags(argc, argv, kUsage);
  const std::string cmd = args.size() > 1 ? args[1] : "";
  // Quiet unless asked: the output is for people and scripts.
  if (std::getenv("RKV_LOG_LEVEL") == nullptr) rkv::SetMinLogSeverity(rkv::LogSeverity::kWarning);
  const char* cluster_dir = std::getenv("RKV_CLUSTER_DIR");
  auto token = rkv::ClusterTokenFromFlags(
      absl::StrCat(cluster_dir ? cluster_dir : "/tmp/rkv-cluster", "/token"));
  if (!token.ok()) {
    std::cerr << "kvctl: " << token.status().message() << "\n";
    return 2;
  }
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (cmd == "status" && args.size() == 2) return Status(coordinator, *token);
  if (cmd == "wait") return Wait(coordinator, *token, {args.begin() + 2, args.end()});
  const bool get = cmd == "get" && args.size() == 3;
  const bool put = cmd == "put" && args.size() == 4;
  const bool del = cmd == "del" && args.size() == 3;
  if (!get && !put && !del) {
    std::cerr << kUsage << "\n";
    return 2;
  }
  auto fabric = rkv::fabric::OpenFabricFromFlags();
  if (!fabric.ok()) {
    std::cerr << "kvctl: " << fabric.status().message() << "\n";
    return 2;
  }
  rkv::client_internal::OpenOptions options;
  options.fabric = std::move(fabric).value();
  options.cluster_token = *token;
  options.scratch_bytes = 4 << 20;
  auto client = rkv::client_internal::OpenCluster(coordinator, options);
  if (!client.ok()) {
    std::cerr << "kvctl: " << client.status().message() << "\n";
    return 1;
  }
  absl::Status s;
  if (get) {
    absl::StatusOr<std::string> v = (*client)->Get(args[2]);
    if (v.ok()) std::cout << *v << "\n";
    s = v.status();
  } else if (put) {
    s = (*client)->Put(args[2], args[3]);
  } else {
    s = (*client)->Delete(args[2]);
  }
  if (!s.ok()) {
    std::cerr << "kvctl: " << s.message() << "\n";
    return absl::IsNotFound(s) ? 1 : 3;
  }
  return 0;
}
