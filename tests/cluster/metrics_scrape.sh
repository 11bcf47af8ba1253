#!/usr/bin/env bash
# Prometheus metrics of a live cluster: kvcoord and three kvservers with
# --metrics_listen (a free port each, from their logs): two copies of every
# key (one replica group of two and a spare), 1,000 records loaded.
# Scraped, the group's members count the records, the spare none, and they
# count lease renewals; the soft fabric's requests and bytes served, summed
# over the servers, grew by the load's writes and CASes at least; the
# coordinator leads and counts three servers up and the group serving. Then
# a member is killed: kvctl wait sees it down (and a wait for it up times
# out), the coordinator counts it down, a reconfiguration and
# a live copy to the spare, each with its duration, the primary the pushes
# it made and their bytes, and the spare the bytes written into it. Every
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
export RKV_ETCD_MEMBERS=0 RKV_REPLICAS=2
export RKV_SERVER_FLAGS="--metrics_listen=127.0.0.1:0" RKV_COORD_FLAGS="--metrics_listen=127.0.0.1:0"
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT
fail() { echo "metrics_scrape: $*" >&2; exit 1; }

bash scripts/cluster.sh start 3 >/dev/null
bash scripts/cluster.sh wait-serving >/dev/null
coord=$(bash scripts/cluster.sh coordinators)
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
        base = re.sub(r'_(bucket|sum|count)$', '', name)
        if types.get(base) == "histogram":
            name = base
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
declare -A url m
# value TEXT NAME [LABELS]: the sample's value (empty if absent).
value() { awk -v want="$2${3:-}" '$1 == want {print $2}' <<<"$1"; }

coord_url=$(metrics_url c1)
for id in s1 s2 s3; do
  url[$id]=$(metrics_url "$id")
  [ -n "${url[$id]}" ] || fail "$id's metrics address is not in its log"
done
[ -n "$coord_url" ] || fail "kvcoord's metrics address is not in its log"

# fabric_sum NAME LABELS: NAME{fabric="soft",LABELS} summed over the
# servers' scrapes in m; nothing (and why, on stderr) where one lacks it.
fabric_sum() {
  local sum=0 v
  for id in s1 s2 s3; do
    v=$(value "${m[$id]}" "$1" "{fabric=\"soft\"${2:+,$2}}")
    if [ -z "$v" ]; then
      echo "metrics_scrape: $id: no $1{fabric=\"soft\"${2:+,$2}}" >&2
      return
    fi
    sum=$((sum + v))
  done
  echo "$sum"
}
# fabric_figures: "KIND OP SUM" lines of the fabric's series, for `read`.
fabric_figures() {
  echo "requests read $(fabric_sum rkv_server_fabric_requests_served_total 'op="read"')"
  echo "requests write $(fabric_sum rkv_server_fabric_requests_served_total 'op="write"')"
  echo "requests cas $(fabric_sum rkv_server_fabric_requests_served_total 'op="cas"')"
  echo "requests faa $(fabric_sum rkv_server_fabric_requests_served_total 'op="faa"')"
  echo "bytes read $(fabric_sum rkv_server_fabric_bytes_served_total 'op="read"')"
  echo "bytes write $(fabric_sum rkv_server_fabric_bytes_served_total 'op="write"')"
  echo "accepted - $(fabric_sum rkv_server_fabric_connections_accepted_total)"
  echo "open - $(fabric_sum rkv_server_fabric_connections)"
}
# The fabric's figures before the load, to see what it added.
for id in s1 s2 s3; do
  m[$id]=$(scrape "${url[$id]}") || fail "kvserver $id's metrics are malformed"
done
declare -A before after
while read -r what op n; do
  [ -n "$n" ] || fail "a fabric series is missing"
  before[$what.$op]=$n
done <<<"$(fabric_figures)"

"$bin/kvbench" --coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token" --phase=load \
  --records=1000 --progress=false >/dev/null

# Usage is counted every 5 s: until two servers count every record and
# the third none (20 s at most).
deadline=$((SECONDS + 20))
while :; do
  counts=""
  for id in s1 s2 s3; do
    m[$id]=$(scrape "${url[$id]}") || fail "kvserver $id's metrics are malformed"
    counts="$counts $(value "${m[$id]}" rkv_server_index_slots_used)"
  done
  [ "$(tr ' ' '\n' <<<"$counts" | sort | tr '\n' ' ')" = " 0 1000 1000 " ] && break
  [ "$SECONDS" -lt "$deadline" ] || fail "slots used per server:$counts (want 1000, 1000 and 0)"
  sleep 0.2
done
for id in s1 s2 s3; do
  for state in live pooled held unallocated; do
    [ -n "$(value "${m[$id]}" rkv_server_heap_bytes "{state=\"$state\"}")" ] ||
      fail "$id: no heap bytes in state $state"
  done
  [ "$(value "${m[$id]}" rkv_server_lease_renewals_total)" -gt 0 ] || fail "$id: no renewal counted"
done
echo "servers: slots used per server:$counts; heap by state; lease renewals"

# Each record costs a WRITE of its block (64 bytes at least) and a CAS of
# its slot, at one copy at least; finding the slot READs the buckets.
while read -r what op n; do
  [ -n "$n" ] || fail "a fabric series is missing"
  after[$what.$op]=$n
done <<<"$(fabric_figures)"
grew() { echo $((after[$1] - before[$1])); }
[ "$(grew requests.write)" -ge 1000 ] || fail "WRITEs served grew by $(grew requests.write), not 1000"
[ "$(grew bytes.write)" -ge 64000 ] || fail "bytes written grew by $(grew bytes.write), not 64000"
[ "$(grew requests.cas)" -ge 1000 ] || fail "CASes served grew by $(grew requests.cas), not 1000"
[ "$(grew requests.read)" -gt 0 ] && [ "$(grew bytes.read)" -gt 0 ] || fail "no READ served"
[ "${after[accepted.-]}" -ge 2 ] || fail "${after[accepted.-]} queue pairs accepted in all"
[ "${after[open.-]}" -le "${after[accepted.-]}" ] || fail "more queue pairs open than accepted"
echo "fabric, for the load: $(grew requests.read) READs of $(grew bytes.read) bytes," \
  "$(grew requests.write) WRITEs of $(grew bytes.write) bytes, $(grew requests.cas) CASes," \
  "$(grew requests.faa) FAAs; ${after[accepted.-]} queue pairs accepted, ${after[open.-]} open"

c=$(scrape "$coord_url") || fail "kvcoord's metrics are malformed"
[ "$(value "$c" rkv_coordinator_leading)" = 1 ] || fail "the only kvcoord does not lead"
[ "$(value "$c" rkv_coordinator_servers '{state="up"}')" = 3 ] || fail "not 3 servers up: $c"
[ "$(value "$c" rkv_coordinator_groups '{state="serving"}')" = 1 ] || fail "not 1 group serving"
[ "$(value "$c" rkv_coordinator_state_writes_total)" -gt 0 ] || fail "no state write counted"
epoch=$(value "$c" rkv_coordinator_map_epoch)

# A member of the group killed: it reconfigures on the survivor, which
# then copies its region to the spare while serving.
victim="" spare=""
for id in s1 s2 s3; do
  if [ "$(value "${m[$id]}" rkv_server_index_slots_used)" = 1000 ]; then victim=$id; else spare=$id; fi
done
spare_written=$(value "${m[$spare]}" rkv_server_fabric_bytes_served_total '{fabric="soft",op="write"}')
bash scripts/cluster.sh kill "$victim"
# kvctl wait: returns once the map says the victim is down; waiting for it
# up ends at the timeout (exit 1, saying what it last saw), and a bad
# condition is refused (exit 2).
kvctl=(timeout 60 "$bin/kvctl" --coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token")
seen=$("${kvctl[@]}" wait server "$victim" --state=down --timeout=30s) ||
  fail "kvctl wait server $victim --state=down: exit $?"
[[ "$seen" == "$victim down "* ]] || fail "kvctl wait server $victim --state=down printed '$seen'"
t0=$(date +%s%N)
rc=0
"${kvctl[@]}" wait server "$victim" --state=up --timeout=1s 2>"$RKV_CLUSTER_DIR/wait.err" || rc=$?
waited_ms=$((($(date +%s%N) - t0) / 1000000))
[ "$rc" = 1 ] || fail "kvctl wait server $victim --state=up: exit $rc, not 1: $(cat "$RKV_CLUSTER_DIR/wait.err")"
grep -q "wait server $victim --state=up: not so after 1s; last seen: $victim down" \
  "$RKV_CLUSTER_DIR/wait.err" || fail "kvctl wait's timeout said: $(cat "$RKV_CLUSTER_DIR/wait.err")"
[ "$waited_ms" -ge 1000 ] && [ "$waited_ms" -lt 10000 ] ||
  fail "kvctl wait --timeout=1s returned after $waited_ms ms"
for bad in "server $victim --state=gone" "server --state=up" "servers" "leader --timeout=soon"; do
  rc=0
  "${kvctl[@]}" wait $bad 2>"$RKV_CLUSTER_DIR/wait.err" || rc=$?
  [ "$rc" = 2 ] && grep -q '^Usage:' "$RKV_CLUSTER_DIR/wait.err" ||
    fail "kvctl wait $bad: exit $rc, not 2 with the usage: $(cat "$RKV_CLUSTER_DIR/wait.err")"
done
"${kvctl[@]}" wait leader --timeout=10s >/dev/null || fail "kvctl wait leader: the one kvcoord does not lead"
echo "kvctl wait: $seen; --state=up timed out after $waited_ms ms (exit 1); bad conditions exit 2"
deadline=$((SECONDS + 30))
until c=$(scrape "$coord_url") &&
    [ "$(value "$c" rkv_coordinator_servers '{state="down"}')" = 1 ] &&
    [ "$(value "$c" rkv_coordinator_live_copy_duration_seconds_count)" -ge 1 ]; do
  [ "$SECONDS" -lt "$deadline" ] ||
    fail "kvcoord does not count $victim down and a live copy done in 30 s: $c"
  sleep 0.2
done
[ "$(value "$c" rkv_coordinator_map_epoch)" -gt "$epoch" ] || fail "the epoch did not grow"
[ "$(value "$c" rkv_coordinator_reconfigurations_total)" -ge 1 ] || fail "no reconfiguration counted"
[ "$(value "$c" rkv_coordinator_reconfiguration_duration_seconds_count)" -ge 1 ] ||
  fail "no reconfiguration's duration observed"
[ "$(value "$c" rkv_coordinator_live_copy_duration_seconds_bucket '{le="+Inf"}')" = \
  "$(value "$c" rkv_coordinator_live_copy_duration_seconds_count)" ] || fail "+Inf bucket != count"
live_copies=0 live_bytes=0
for id in s1 s2 s3; do
  [ "$id" = "$victim" ] && continue
  p=$(scrape "${url[$id]}") || fail "kvserver $id's metrics are malformed"
  live_copies=$((live_copies + $(value "$p" rkv_server_pushes_total '{kind="live_copy",outcome="done"}')))
  live_bytes=$((live_bytes + $(value "$p" rkv_server_push_bytes_total '{kind="live_copy"}')))
done
[ "$live_copies" -ge 1 ] && [ "$live_bytes" -gt 0 ] ||
  fail "no live copy pushed by the survivor ($live_copies, $live_bytes bytes)"
# The copy reached the spare through its fabric: the 1,000 records' blocks.
p=$(scrape "${url[$spare]}") || fail "kvserver $spare's metrics are malformed"
spare_copied=$(($(value "$p" rkv_server_fabric_bytes_served_total '{fabric="soft",op="write"}') -
  spare_written))
[ "$spare_copied" -ge 64000 ] || fail "the spare $spare was written $spare_copied bytes by the copy"
# The spare copied in: the group serves with two copies again.
"${kvctl[@]}" wait serving --groups=1 --timeout=30s >/dev/null ||
  fail "kvctl wait serving: the group does not serve with two copies again"
echo "after kill -9 of $victim: epoch $epoch -> $(value "$c" rkv_coordinator_map_epoch)," \
  "$(value "$c" rkv_coordinator_reconfigurations_total) reconfiguration(s)," \
  "$live_copies live copy of $((live_bytes >> 20)) MiB"
echo "metrics_scrape: ok"
