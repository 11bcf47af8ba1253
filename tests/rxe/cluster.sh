#!/usr/bin/env bash
# A cluster over the verbs fabric, on the Soft-RoCE devices of the guest that
# scripts/rdma-vm.sh boots: kvcoord, three kvservers with region files on
# rxe1, and kvbench clients on rxe0, so that every request crosses the veth
# pair between them.
#
#   tests/rxe/cluster.sh restart BIN_DIR   workloads A and D with --verify
#       --check; then A again while one server is killed with kill -9 and
#       restarted from its region file; then a writer killed with kill -9,
#       whose sessions every server fences at once for their closed
#       connections, and whose heap comes back.
#   tests/rxe/cluster.sh loss BIN_DIR   workload A with --verify --check
#       while the link loses 1 % of packets with 2 ms delay: RC
#       retransmission hides it, but for the responses Soft-RoCE loses
#       (docs/ARCHITECTURE.md): those fail their connection, and the
#       operations then in flight fail with Unavailable.
#   tests/rxe/cluster.sh cut BIN_DIR    the same while the link is cut for
#       longer than the retry budget: error completions, never a hang, and
#       the client reconnects once the link is back.
#
# Each run must end with 0 wrong reads and 0 lost writes. Needs the guest's
# RKV_RXE_* variables; figures from the guest are not performance figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
usage="usage: cluster.sh restart|loss|cut BIN_DIR"
mode="${1:?$usage}"
bin="$(cd "${2:?$usage}" && pwd)"
: "${RKV_RXE_SERVER_ADDR:?not in the rdma-vm guest (scripts/rdma-vm.sh sets RKV_RXE_*)}"
source scripts/lib/proc.sh
source tests/lib/kvbench_json.sh

export RKV_BIN="$bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-rxe.XXXXXX)"
export RKV_COORDINATOR="127.0.0.1:7400"
export RKV_FABRIC=verbs
# The verbs fabric is under test here, not the control plane: one kvcoord
# with its state file (etcd's 500 ms elections would flap under emulation).
export RKV_ETCD_MEMBERS=0
export RKV_SERVER_LISTEN="$RKV_RXE_SERVER_ADDR:0"
export RKV_RDMA_DEVICE="$RKV_RXE_SERVER_DEVICE"
export RKV_SERVER_MEMORY=32MiB
export RKV_LEASE_MS=1500
dir="$RKV_CLUSTER_DIR"
load_pid=""
cleanup() {
  [ -n "$load_pid" ] && kill -9 "$load_pid" 2>/dev/null || true
  tc qdisc del dev veth0 root 2>/dev/null || true
  tc qdisc del dev veth1 root 2>/dev/null || true
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

say() { echo "[rxe $(date +%T)] $*"; }
fail() {
  for log in "$dir"/*.log; do
    [ -f "$log" ] && { echo "--- $log (last lines)"; tail -n 25 "$log"; } >&2
  done
  echo "rxe cluster: $*" >&2
  exit 1
}

kvbench() {
  "$bin/kvbench" --coordinator="$RKV_COORDINATOR" --fabric=verbs \
    --rdma_device="$RKV_RXE_CLIENT_DEVICE" --verify --check --check_patience=30s "$@"
}

# expect_clean NAME JSON: every read right, nothing lost, all read back.
expect_clean() {
  local name="$1" json="$2" wrong lost unreadable checked
  [ -s "$json" ] || fail "$name: kvbench wrote no results"
  lost=$(( $(kvbench_field "$json" run lost) + $(kvbench_field "$json" check mismatches) ))
  wrong=$(( $(kvbench_field "$json" run mismatches) - $(kvbench_field "$json" run lost) ))
  unreadable=$(kvbench_field "$json" check errors)
  checked=$(kvbench_field "$json" check reads_checked)
  echo "$name: operations=$(kvbench_field "$json" run operations)" \
    "errors=$(kvbench_field "$json" run errors) keys_checked=$checked" \
    "wrong_reads=$wrong lost=$lost unreadable=$unreadable"
  [ "$wrong" = 0 ] && [ "$lost" = 0 ] && [ "$unreadable" = 0 ] && [ "$checked" -gt 0 ] ||
    fail "$name: wrong reads, lost writes or unreadable keys"
}

# start_load NAME SECONDS: workload A in the background, progress in NAME.log.
start_load() {
  kvbench --workload=a --records=1000 --duration="$2s" --threads=2 --outstanding=4 \
    --json="$dir/$1.json" >"$dir/$1.log" 2>&1 &
  load_pid=$!
}
# wait_progress NAME OPS: until the load's progress line shows OPS done.
wait_progress() {
  local deadline=$((SECONDS + 60))
  until awk -v want="$2" '$1 == "run" && $4 >= want {found = 1} END {exit !found}' \
      "$dir/$1.log" 2>/dev/null; do
    proc_alive "$load_pid" || fail "$1: kvbench ended early: $(tail -n 3 "$dir/$1.log")"
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 5 "$dir/$1.log" >&2
      fail "$1: no progress to $2 operations in 60 s"
    fi
    sleep 0.2
  done
}
finish_load() {  # NAME: waits for the load (it is bounded by --duration)
  wait "$load_pid" || true
  load_pid=""
  grep -E '^(run|check|verify|first)' "$dir/$1.log" | tail -n 8 || true
}

ibv_devinfo -d "$RKV_RXE_SERVER_DEVICE" | grep -E 'hca_id|transport|state|active_mtu|link_layer'
bash scripts/cluster.sh start 3

case "$mode" in
  restart)
    for w in a d; do
      say "workload $w"
      kvbench --workload="$w" --records=1000 --operations=4000 --threads=2 --outstanding=4 \
        --progress=false --json="$dir/$w.json" | grep -E '^(\[|verify|first)' || true
      expect_clean "workload $w" "$dir/$w.json"
    done
    say "workload A while s2 is killed with kill -9 and restarted from its region file"
    start_load restart 40
    wait_progress restart 500
    bash scripts/cluster.sh kill s2
    bash scripts/cluster.sh wait s2 down
    bash scripts/cluster.sh restart-server s2
    bash scripts/cluster.sh wait s2 up
    say "s2 is back"
    finish_load restart
    expect_clean "kill -9 and restart" "$dir/restart.json"
    # The kernel disconnects a killed process's connections (its cm ids
    # go with it): each server fences the writer's session at its next
    # check, not a lease later, and its heap census takes back the heap.
    say "a writer killed with kill -9"
    fences='fenced client session .*: its connections closed'
    rounds='heap census round .* back in the free pool'
    declare -A fences_before rounds_before
    for s in s1 s2 s3; do
      fences_before[$s]=$(grep -c "$fences" "$dir/$s.log" || true)
      rounds_before[$s]=$(grep -c "$rounds" "$dir/$s.log" || true)
    done
    # Started as itself (not through the kvbench function, whose subshell
    # the kill would hit instead).
    "$bin/kvbench" --coordinator="$RKV_COORDINATOR" --fabric=verbs \
      --rdma_device="$RKV_RXE_CLIENT_DEVICE" --phase=run --workload=a --records=1000 \
      --duration=30s --threads=2 --outstanding=4 >"$dir/crash.log" 2>&1 &
    load_pid=$!
    wait_progress crash 300
    kill -9 "$load_pid"
    wait "$load_pid" 2>/dev/null || true
    load_pid=""
    deadline=$((SECONDS + 20))
    for s in s1 s2 s3; do
      until [ "$(grep -c "$fences" "$dir/$s.log")" -gt "${fences_before[$s]}" ] &&
          [ "$(grep -c "$rounds" "$dir/$s.log")" -gt "${rounds_before[$s]}" ]; do
        [ "$SECONDS" -lt "$deadline" ] ||
          fail "$s did not fence the killed writer for its closed connections and reclaim its heap in 20 s"
        sleep 0.2
      done
    done
    say "every server fenced the killed writer and took its heap back"
    ;;
  loss)
    start_load loss 30
    wait_progress loss 300
    # No jitter: netem would reorder packets, and RoCE, like the lossless
    # fabrics it is made for, expects them in order.
    say "1 % loss and 2 ms delay on the link, both ways"
    tc qdisc add dev veth0 root netem loss 1% delay 2ms
    tc qdisc add dev veth1 root netem loss 1% delay 2ms
    before=$(awk '$1 == "run" {n = $4} END {print n + 0}' "$dir/loss.log")
    wait_progress loss $((before + 3000))
    tc qdisc del dev veth0 root
    tc qdisc del dev veth1 root
    errors=$(awk '$1 == "run" {e = $NF} END {print e + 0}' "$dir/loss.log")
    say "3000 operations under loss, $errors failed"
    finish_load loss
    expect_clean "packet loss" "$dir/loss.json"
    ;;
  cut)
    # The link is cut for 10 s, five times the retry budget (the fabric's
    # ~2 s, then the client's reconnection attempt, up to 5 s, before its
    # operations fail): every packet dropped both ways, the ports staying
    # up, as when a cable or a switch beyond the port fails.
    start_load cut 45
    wait_progress cut 500
    retry_exceeded=/sys/class/infiniband/$RKV_RXE_CLIENT_DEVICE/ports/1/hw_counters/retry_exceeded_err
    errors_before=$(awk '$1 == "run" {e = $NF} END {print e + 0}' "$dir/cut.log")
    retries_before=$(cat "$retry_exceeded")
    say "the link is cut for 10 s"
    tc qdisc add dev veth0 root netem loss 100%
    tc qdisc add dev veth1 root netem loss 100%
    sleep 10  # The outage itself: its length is what is tested.
    tc qdisc del dev veth0 root
    tc qdisc del dev veth1 root
    retries=$(( $(cat "$retry_exceeded") - retries_before ))
    errors_after=$(awk '$1 == "run" {e = $NF} END {print e + 0}' "$dir/cut.log")
    say "the link is back; $RKV_RXE_CLIENT_DEVICE counted $retries retry-exceeded completions," \
      "kvbench $((errors_after - errors_before)) failed operations"
    [ "$retries" -gt 0 ] || fail "link cut: the device reported no retry-exceeded completion"
    [ "$errors_after" -gt "$errors_before" ] || fail "link cut: no operation failed"
    done_after=$(awk '$1 == "run" {n = $4} END {print n + 0}' "$dir/cut.log")
    wait_progress cut $((done_after + 1000))
    say "the client is working again"
    finish_load cut
    expect_clean "link cut" "$dir/cut.json"
    ;;
  *) fail "unknown mode '$mode'" ;;
esac
echo "rxe cluster ($mode): passed"
