#!/usr/bin/env bash
# Clients killed while they write must not eat the heap: a server of one
# copy takes back what they held (their chunks, the blocks they had freed)
# while it serves, once their leases lapse. One server of 256 MiB
# (scripts/cluster.sh, one copy) holding 5,000 records of 1000 B, then a
# writing kvbench (YCSB-A, 2 threads x 16 in flight) killed with SIGKILL
# KILLS times, without a restart: then a YCSB-A run without one error and
# no wrong value, the records intact, and the heap the killed writers held
# back in the free pool. Everything started here is stopped here.
#
#   tests/cluster/client_crash_reclaim.sh BIN_DIR [KILLS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh
source tests/lib/kvbench_json.sh
bin="$(cd "${1:?usage: client_crash_reclaim.sh BIN_DIR [KILLS]}" && pwd)"
kills="${2:-100}"
records=5000
export RKV_BIN="$bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-client-reclaim.XXXXXX)"
export RKV_PORT_BASE=$(proc_pick_ports 19000 20000)
export RKV_ETCD_MEMBERS=0 RKV_SERVER_MEMORY=256MiB
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT
fail() { echo "client_crash_reclaim: $*" >&2; exit 1; }

bash scripts/cluster.sh start 1 >/dev/null
coord=$(bash scripts/cluster.sh coordinators)
flags=(--coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token" --records=$records
       --value_size=1000)

# server_stat KEY: server s1's figure from kvctl status --json.
server_stat() {
  "$bin/kvctl" --coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token" status --json |
    grep -o "\"$1\": [0-9]*" | head -1 | awk '{print $2}'
}
# wait_stat KEY OP VALUE [SECONDS]: until the figure compares so (usage is
# counted every 5 s), 60 s at most.
wait_stat() {
  local deadline=$((SECONDS + ${4:-60})) v
  while :; do
    v=$(server_stat "$1")
    [ -n "$v" ] && [ "$v" "$2" "$3" ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || fail "$1 is $v, not $2 $3, after ${4:-60} s"
    sleep 0.2
  done
}
heap_line() {
  echo "$(($(server_stat heap_live) >> 20)) MiB live, $(($(server_stat heap_pooled) >> 20)) MiB pooled, $(($(server_stat heap_held) >> 20)) MiB held, $(($(server_stat heap_used) >> 20)) of $(($(server_stat heap_bytes) >> 20)) MiB handed out by the cursor"
}

"$bin/kvbench" "${flags[@]}" --phase=load --progress=false >/dev/null
wait_stat slots_used -eq $records
echo "loaded: $(heap_line)"

for i in $(seq 1 "$kills"); do
  out="$RKV_CLUSTER_DIR/writer.out"
  "$bin/kvbench" "${flags[@]}" --phase=run --workload=a --threads=2 --outstanding=16 \
    --duration=120s >"$out" 2>&1 &
  pid=$!
  start=$(proc_start_time "$pid")
  # Killed once it has written for a second (its first progress line).
  deadline=$((SECONDS + 60))
  until grep -qE '^run +[0-9.]+ s +[1-9][0-9]* ops' "$out"; do
    proc_alive "$pid" "$start" || fail "writer $i exited early: $(tail -3 "$out")"
    [ "$SECONDS" -lt "$deadline" ] || fail "writer $i wrote nothing in 60 s"
    sleep 0.05
  done
  kill -9 "$pid"
  proc_wait_gone "$pid" "$start" 10 || fail "writer $i outlived SIGKILL"
  wait "$pid" 2>/dev/null || true
done
echo "after $kills killed writers: $(heap_line)"
# Their leases lapse, the server fences them, and a census round takes
# back what they held: no session left, nothing held.
wait_stat client_sessions_fenced -ge "$kills"
wait_stat client_sessions -eq 0
wait_stat heap_held -eq 0
wait_stat heap_reclaimed -gt 0
echo "once their leases lapsed: $(heap_line); $(($(server_stat heap_reclaimed) >> 20)) MiB reclaimed in all, $(server_stat client_sessions_fenced) sessions fenced"
grep -q "heap census round" "$RKV_CLUSTER_DIR/s1.log" || fail "no census round in the server's log"

json="$RKV_CLUSTER_DIR/after.json"
"$bin/kvbench" "${flags[@]}" --phase=run --workload=a --threads=2 --outstanding=16 \
  --duration=2s --verify --progress=false --json="$json" >/dev/null ||
  fail "YCSB-A after the crashes: kvbench exited with $?"
[ "$(kvbench_field "$json" run errors)" = 0 ] ||
  fail "YCSB-A after the crashes had errors: $(cat "$json")"
grep -q '"mismatches": 0' "$json" || fail "YCSB-A after the crashes read wrong values"
wait_stat slots_used -eq $records
echo "YCSB-A after the crashes: $(kvbench_field "$json" run operations) operations, 0 errors; $(heap_line)"
echo "client_crash_reclaim: ok"
