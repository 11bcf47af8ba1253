#!/usr/bin/env bash
# Clients killed while they write must not eat the heap: the server (with
# R copies, the group's primary, once every copy fenced them) takes back
# what they held (their chunks, the blocks they had freed) while it
# serves, as soon as it fenced them for their closed connections. One
# replica group of COPIES servers of 256 MiB (scripts/cluster.sh) holding
# 5,000 records of 1000 B, then a writing kvbench (YCSB-A, 2 threads x 16
# in flight) killed with SIGKILL KILLS times, without a restart: no writer
# sees an error (the heap comes back while the next ones write), then a
# YCSB-A run without one error and no wrong value, the records intact, and
# the heap the killed writers held back in the free pool. Everything
# started here is stopped here.
#
#   tests/cluster/client_crash_reclaim.sh BIN_DIR [KILLS] [COPIES]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh
source tests/lib/kvbench_json.sh
source tests/lib/writer_kills.sh
bin="$(cd "${1:?usage: client_crash_reclaim.sh BIN_DIR [KILLS] [COPIES]}" && pwd)"
kills="${2:-100}"
copies="${3:-1}"
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

start_group "$copies" $records
heap_line() {
  echo "$(($(server_stat heap_live) >> 20)) MiB live, $(($(server_stat heap_pooled) >> 20)) MiB pooled, $(($(server_stat heap_held) >> 20)) MiB held, $(($(server_stat heap_used) >> 20)) of $(($(server_stat heap_bytes) >> 20)) MiB handed out by the cursor"
}

"$bin/kvbench" "${flags[@]}" --phase=load --progress=false >/dev/null
wait_stat slots_used -eq $records
echo "loaded: $(heap_line)"

kill_writers "$kills"
echo "after $kills killed writers: $(heap_line); the writers saw $writer_errors errors"
# A killed writer's connections close with it: the server fences its
# sessions at once, and the census takes their heap back while the next
# writers run, so that none of them finds the heap full (the heap holds
# the chunks of a few dozen writers, far fewer than the kills).
[ "$writer_errors" = 0 ] || fail "the writers saw $writer_errors errors while the others were killed"
grep -q "its connections closed" "$RKV_CLUSTER_DIR"/s*.log ||
  fail "no session was fenced for its closed connections"
# The last ones fenced too, a census round takes back what they held: no
# session left, nothing held.
wait_stat client_sessions_fenced -ge "$kills"
wait_stat client_sessions -eq 0
# With copies, a block a backup's slot names stays out of the pool though
# no slot of the primary's does (the tentative word of a write cut short,
# until the key's next write): a few of them.
wait_stat heap_held -le $((copies == 1 ? 0 : 1 << 20))
wait_stat heap_reclaimed -gt 0
echo "once the last were fenced: $(heap_line); $(($(server_stat heap_reclaimed) >> 20)) MiB reclaimed in all, $(server_stat client_sessions_fenced) sessions fenced"
grep -q "heap census round" "$RKV_CLUSTER_DIR"/s*.log || fail "no census round in the servers' logs"

ycsb_a_clean "after the crashes"
wait_stat slots_used -eq $records
echo "and then: $(heap_line)"
echo "client_crash_reclaim: ok"
