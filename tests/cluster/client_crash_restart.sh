#!/usr/bin/env bash
# A server restarted from its region file takes back all heap nothing
# names, whatever stranded it. Clients killed while they write strand the
# heap they held (their chunks, the blocks they had freed) on a server that
# keeps no client leases (--client_lease=0, as with clients of an older
# build), which therefore cannot take it back while it serves. One server
# (scripts/cluster.sh, one copy), records loaded, then a writing kvbench
# killed with SIGKILL several times: kvctl status must show the heap they
# held, and after a restart none held, the records intact and a YCSB-A run
# without one error. (With leases, the heap census takes it back without a
# restart: client_crash_reclaim.sh.) Everything started here is stopped
# here.
#
#   tests/cluster/client_crash_restart.sh BIN_DIR [KILLS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh
source tests/lib/kvbench_json.sh
source tests/lib/writer_kills.sh
bin="$(cd "${1:?usage: client_crash_restart.sh BIN_DIR [KILLS]}" && pwd)"
kills="${2:-5}"
records=2000
export RKV_BIN="$bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-client-crash.XXXXXX)"
export RKV_PORT_BASE=$(proc_pick_ports 19000 20000)
export RKV_ETCD_MEMBERS=0 RKV_SERVER_MEMORY=64MiB RKV_SERVER_FLAGS=--client_lease=0
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT
fail() { echo "client_crash_restart: $*" >&2; exit 1; }

start_group 1 $records

"$bin/kvbench" "${flags[@]}" --phase=load --progress=false >/dev/null
wait_stat slots_used -eq $records
live=$(server_stat heap_live)

kill_writers "$kills"
wait_stat heap_held -gt 0
echo "after $kills killed writers: $(($(server_stat heap_held) >> 20)) MiB held, $(($(server_stat heap_pooled) >> 20)) MiB pooled, $((live >> 10)) KiB live"

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

ycsb_a_clean "after the restart"
echo "client_crash_restart: ok"
