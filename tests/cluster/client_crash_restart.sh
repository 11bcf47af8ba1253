#!/usr/bin/env bash
# Clients killed while they write strand the heap they held (their chunks,
# the blocks they had freed); a server restarted from its region file takes
# all of it back. One server (scripts/cluster.sh, one copy), records
# loaded, then a writing kvbench killed with SIGKILL several times: kvctl
# status must show the heap they held and their sessions fenced once their
# leases lapsed, and after a restart none held, the records intact and a
# YCSB-A run without one error. Everything started
# here is stopped here.
#
#   tests/cluster/client_crash_restart.sh BIN_DIR [KILLS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh
source tests/lib/kvbench_json.sh
bin="$(cd "${1:?usage: client_crash_restart.sh BIN_DIR [KILLS]}" && pwd)"
kills="${2:-5}"
records=2000
export RKV_BIN="$bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-client-crash.XXXXXX)"
export RKV_PORT_BASE=$(proc_pick_ports 19000 20000)
export RKV_ETCD_MEMBERS=0 RKV_SERVER_MEMORY=64MiB
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT
fail() { echo "client_crash_restart: $*" >&2; exit 1; }

bash scripts/cluster.sh start 1 >/dev/null
coord=$(bash scripts/cluster.sh coordinators)
flags=(--coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token" --records=$records
       --value_size=1000)

# server_stat KEY: server s1's figure from kvctl status --json.
server_stat() {
  "$bin/kvctl" --coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token" status --json |
    grep -o "\"$1\": [0-9]*" | head -1 | awk '{print $2}'
}
# wait_stat KEY OP VALUE: until the figure compares so (usage is counted
# every 5 s), 30 s at most.
wait_stat() {
  local deadline=$((SECONDS + 30)) v
  while :; do
    v=$(server_stat "$1")
    [ -n "$v" ] && [ "$v" "$2" "$3" ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || fail "$1 is $v, not $2 $3, after 30 s"
    sleep 0.2
  done
}

"$bin/kvbench" "${flags[@]}" --phase=load --progress=false >/dev/null
wait_stat slots_used -eq $records
live=$(server_stat heap_live)

for i in $(seq 1 "$kills"); do
  out="$RKV_CLUSTER_DIR/writer$i.out"
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
wait_stat heap_held -gt 0
# Their sessions' leases lapse, and the server fences them: nothing of
# theirs could land any more. The loader closed, and fenced nobody.
wait_stat client_sessions_fenced -ge "$kills"
wait_stat client_sessions -eq 0
echo "after $kills killed writers: $(($(server_stat heap_held) >> 20)) MiB held, $(($(server_stat heap_pooled) >> 20)) MiB pooled, $((live >> 10)) KiB live, $(server_stat client_sessions_fenced) sessions fenced"

generation=$(server_stat generation)
bash scripts/cluster.sh kill s1 >/dev/null
bash scripts/cluster.sh restart-server s1 >/dev/null
# The map may still show the killed instance for a lease: wait for the new
# one (its new generation) and for its counts.
wait_stat generation -ne "$generation"
grep -q "settled: " "$RKV_CLUSTER_DIR/s1.log" || fail "the restarted server did not sweep its heap"
wait_stat slots_used -eq $records
wait_stat heap_held -eq 0
[ "$(server_stat heap_live)" -eq "$live" ] || fail "live heap $(server_stat heap_live) after the restart, $live before"
echo "after a restart: 0 held, $(($(server_stat heap_pooled) >> 20)) MiB pooled"

json="$RKV_CLUSTER_DIR/after.json"
"$bin/kvbench" "${flags[@]}" --phase=run --workload=a --threads=2 --outstanding=16 \
  --duration=2s --verify --progress=false --json="$json" >/dev/null ||
  fail "YCSB-A after the restart: kvbench exited with $?"
[ "$(kvbench_field "$json" run errors)" = 0 ] ||
  fail "YCSB-A after the restart had errors: $(cat "$json")"
grep -q '"mismatches": 0' "$json" || fail "YCSB-A after the restart read wrong values"
echo "client_crash_restart: ok"
