#!/usr/bin/env bash
# Prometheus metrics of a live cluster: kvcoord and two kvservers with
# --metrics_listen (a free port each, from their logs), 1,000 records
# loaded. Scraped, the servers' slots add up to the records, their live
# heap holds them, and they count lease renewals; the coordinator counts two servers up and two groups
# serving and leads; once a server is killed, it counts one down. Every
# sample line is well formed, every family has its HELP and TYPE, every
# counter ends in _total. Everything started here is stopped here.
#
#   tests/cluster/metrics_scrape.sh BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh
bin="$(cd "${1:?usage: metrics_scrape.sh BIN_DIR}" && pwd)"
export RKV_BIN="$bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-metrics.XXXXXX)"
export RKV_PORT_BASE=$(proc_pick_ports 18000 19000)
export RKV_ETCD_MEMBERS=0
export RKV_SERVER_FLAGS="--metrics_listen=127.0.0.1:0" RKV_COORD_FLAGS="--metrics_listen=127.0.0.1:0"
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT
fail() { echo "metrics_scrape: $*" >&2; exit 1; }

bash scripts/cluster.sh start 2 >/dev/null
coord=$(bash scripts/cluster.sh coordinators)
"$bin/kvbench" --coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token" --phase=load \
  --records=1000 --progress=false >/dev/null

# metrics_url NAME: where the process's log says it serves its metrics.
metrics_url() {
  grep -ho 'metrics at http://[0-9.]*:[0-9]*/metrics' "$RKV_CLUSTER_DIR/$1.log" | tail -1 |
    cut -d' ' -f3
}
# scrape URL: the exposition, checked for form (on stderr, and exit 1, if not).
scrape() {
  python3 - "$1" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
helps, types, bad = set(), {}, []
for line in text.splitlines():
    if line.startswith("# HELP "):
        helps.add(line.split()[2])
    elif line.startswith("# TYPE "):
        _, _, name, kind = line.split()
        types[name] = kind
    elif not re.fullmatch(r'(rkv_[a-z_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.e+-]+', line):
        bad.append(f"malformed: {line}")
    else:
        name = re.match(r'rkv_[a-z_]+', line).group(0)
        if name not in helps or name not in types:
            bad.append(f"no HELP or TYPE before {name}")
for name, kind in types.items():
    if (kind == "counter") != name.endswith("_total"):
        bad.append(f"{name}: a {kind}; counters, and only they, end in _total")
if bad:
    sys.exit("\n".join(bad))
print(text)
PY
}
# value TEXT NAME [LABELS]: the sample's value (empty if absent).
value() { awk -v want="$2${3:-}" '$1 == want {print $2}' <<<"$1"; }

coord_url=$(metrics_url c1)
s1_url=$(metrics_url s1)
s2_url=$(metrics_url s2)
[ -n "$coord_url" ] && [ -n "$s1_url" ] && [ -n "$s2_url" ] || fail "a metrics address is not in the logs"

# Usage is counted every 5 s: until the servers' slots add up (20 s at most).
deadline=$((SECONDS + 20))
while :; do
  m1=$(scrape "$s1_url") || fail "kvserver s1's metrics are malformed"
  m2=$(scrape "$s2_url") || fail "kvserver s2's metrics are malformed"
  used=$(( $(value "$m1" rkv_server_index_slots_used) + $(value "$m2" rkv_server_index_slots_used) ))
  [ "$used" = 1000 ] && break
  [ "$SECONDS" -lt "$deadline" ] || fail "the servers count $used slots used, not 1000"
  sleep 0.2
done
for m in "$m1" "$m2"; do
  for state in live pooled held unallocated; do
    [ -n "$(value "$m" rkv_server_heap_bytes "{state=\"$state\"}")" ] ||
      fail "no heap bytes in state $state"
  done
  [ "$(value "$m" rkv_server_heap_bytes '{state="live"}')" -gt $((500 * 1000)) ] ||
    fail "live heap below what 500 records of 1000 B take"
  [ "$(value "$m" rkv_server_lease_renewals_total)" -gt 0 ] || fail "no lease renewal counted"
done
echo "servers: slots used $used, heap by state, lease renewals"

c=$(scrape "$coord_url") || fail "kvcoord's metrics are malformed"
[ "$(value "$c" rkv_coordinator_leading)" = 1 ] || fail "the only kvcoord does not lead"
[ "$(value "$c" rkv_coordinator_servers '{state="up"}')" = 2 ] || fail "not 2 servers up: $c"
[ "$(value "$c" rkv_coordinator_groups '{state="serving"}')" = 2 ] || fail "not 2 groups serving"
[ "$(value "$c" rkv_coordinator_state_writes_total)" -gt 0 ] || fail "no state write counted"
epoch=$(value "$c" rkv_coordinator_map_epoch)

bash scripts/cluster.sh kill s2
deadline=$((SECONDS + 20))
until c=$(scrape "$coord_url") && [ "$(value "$c" rkv_coordinator_servers '{state="down"}')" = 1 ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "kvcoord does not count the killed server down"
  sleep 0.2
done
[ "$(value "$c" rkv_coordinator_map_epoch)" -gt "$epoch" ] || fail "the epoch did not grow"
echo "coordinator: 2 servers up, then 1 down after kill -9; epoch $epoch -> $(value "$c" rkv_coordinator_map_epoch)"
echo "metrics_scrape: ok"
