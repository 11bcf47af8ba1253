#!/usr/bin/env bash
# The fault harness: a cluster on loopback under a verifying YCSB load
# (kvbench --verify --check), with faults injected while it runs:
#   kill -9 of a kvserver and its restart from its region file;
#   SIGSTOP of a kvserver past its lease, then SIGCONT;
#   kill -9 of kvcoord and its restart;
#   kill -9 of a second client in the middle of its inserts and updates;
#   soft-fabric faults on the verifying client (delays, dropped connections,
#   requests failed with unknown outcome).
# The load is YCSB workload A (reads and updates); with --deletes, rkv
# Inserts and Deletes too, so keys come and go. Afterwards every key whose
# change was acknowledged is read back and must hold that write or a later
# one, or be absent after a delete; no read during the run may have
# returned a value that was never written or was already overwritten or
# deleted, and no insert or delete may have found a key present that was
# surely absent (a wrong read), or found a key absent after a write of it
# was acknowledged (lost, as is a mismatch in the read-back). A change that
# failed with unknown outcome may take effect at any time after it started,
# even after later acknowledged changes: its value (for a delete, the key's
# absence) is accepted whenever it is found. The last line:
#   faults=N acked_writes=M keys_checked=K wrong_reads=W lost=L
#
#   tests/fault/run.sh [--quick | --long] [--deletes] [--bin=DIR] [--lose-region]
#                      [--replicas=R [--lose-disk]]
#
# --quick (the default; ctest runs it with --deletes): one round of faults,
# about 25 s.
# --long: ten rounds, about 3 minutes. Exit status 0 iff nothing was lost
# and no read was wrong. --lose-region restarts s1 without its region file,
# as a server without one would come back: the harness must then report
# lost writes (ctest checks that it does).
# RKV_FAULT_KEEP=1 keeps the cluster's folder (logs, region files).
# --replicas=R (2 or 3): kvcoord --replicas=R, with R + 1 servers (one
# group and a spare); after each fault the harness waits until every group
# serves with R copies again. --lose-disk: every killed server loses its
# region file before it comes back (it returns blank, as after a lost
# disk, and is copied in again); nothing acknowledged may be lost.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=1
bin=build/bin
lose_region=0
lose_disk=0
replicas=1
mix=(--workload=a)
for arg in "$@"; do
  case "$arg" in
    --quick) rounds=1 ;;
    --long) rounds=10 ;;
    --bin=*) bin="${arg#*=}" ;;
    --lose-region) lose_region=1 ;;
    --lose-disk) lose_disk=1 ;;
    --replicas=*) replicas="${arg#*=}" ;;
    --deletes)
      mix=(--workload=a --read_proportion=0.4 --update_proportion=0.3 --insert_proportion=0.15
           --delete_proportion=0.15) ;;
    -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
[[ "$replicas" =~ ^[123]$ ]] || { echo "run.sh: --replicas must be 1, 2 or 3" >&2; exit 2; }
if [ "$lose_disk" = 1 ] && [ "$replicas" = 1 ]; then
  echo "run.sh: --lose-disk needs --replicas=2 or 3 (one copy cannot survive it: see --lose-region)" >&2
  exit 2
fi
servers=3
[ "$replicas" -gt 1 ] && servers=$((replicas + 1))
bin="$(cd "$bin" && pwd)"
export RKV_BIN="$bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-fault.XXXXXX)"
source scripts/lib/proc.sh
port=$(proc_pick_ports 26000 30000)
export RKV_COORDINATOR="127.0.0.1:$port"
# RKV_TEST_LEASE_MS lengthens the lease for slow builds (sanitizers).
export RKV_LEASE_MS="${RKV_TEST_LEASE_MS:-600}"
export RKV_SERVER_MEMORY=32MiB
export RKV_REPLICAS="$replicas"
dir="$RKV_CLUSTER_DIR"
victim_pid=""
load_pid=""
cleanup() {
  [ -n "$victim_pid" ] && kill -9 "$victim_pid" 2>/dev/null || true
  [ -n "$load_pid" ] && kill -9 "$load_pid" 2>/dev/null || true
  for s in $(seq -f 's%g' 1 "$servers"); do
    [ -f "$dir/$s.pid" ] && kill -CONT "$(cut -d' ' -f1 "$dir/$s.pid")" 2>/dev/null || true
  done
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  if [ -n "${RKV_FAULT_KEEP:-}" ]; then echo "logs kept in $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

say() { echo "[fault $(date +%T)] $*"; }
faults=0
pid_of() { cut -d' ' -f1 "$dir/$1.pid"; }
# kill9 NAME: SIGKILL, then wait until the process is gone.
kill9() { bash scripts/cluster.sh kill "$1"; }
comeback="from its region file"
[ "$lose_disk" = 1 ] && comeback="without its region file (a lost disk)"
# restart ID: the server comes back (blank with --lose-disk).
restart() {
  if [ "$lose_disk" = 1 ]; then rm -f "$dir/$1.region"; fi
  bash scripts/cluster.sh restart-server "$1"
}
# settle SECONDS: replicated, wait until every group serves with all its
# copies again; otherwise give the cluster that long.
settle() {
  if [ "$replicas" -gt 1 ]; then
    bash scripts/cluster.sh wait-serving 1
  else
    sleep "$1"
  fi
}

bash scripts/cluster.sh start "$servers"

# The verifying load: every read checked, and with --deletes every
# insert's and delete's answer too (an insert brings back a key the thread
# deleted); every acknowledged change read back at the end. Its own
# soft-fabric faults come on top.
per_round=18
duration=$((rounds * per_round + 4))
"$bin/kvbench" "${mix[@]}" --records=4000 --duration="${duration}s" --threads=2 \
  --outstanding=8 --verify --check --check_patience=30s --progress=false \
  --coordinator="$RKV_COORDINATOR" --json="$dir/load.json" \
  --fabric=soft --fabric_faults="delay=0.002,max_delay=3ms,fail=0.0002,drop=0.0001,seed=$RANDOM" \
  >"$dir/kvbench.log" 2>&1 &
load_pid=$!
sleep 3

for round in $(seq 1 "$rounds"); do
  say "round $round of $rounds"
  # A second client, on keys of its own, killed in the middle of its writes.
  "$bin/kvbench" --workload=a --key_prefix=victim --records=2000 --duration=60s \
    --outstanding=16 --progress=false --coordinator="$RKV_COORDINATOR" >/dev/null 2>&1 &
  victim_pid=$!
  sleep 2
  say "kill -9 of a client in the middle of its inserts and updates"
  kill -9 "$victim_pid"; wait "$victim_pid" 2>/dev/null || true
  victim_pid=""
  faults=$((faults + 1))

  say "kill -9 of kvserver s1, restart $comeback"
  kill9 s1
  faults=$((faults + 1))
  sleep 1.5
  if [ "$lose_region" = 1 ]; then rm -f "$dir/s1.region"; fi
  restart s1
  settle 2

  say "SIGSTOP of kvserver s2 past its lease, then SIGCONT"
  kill -STOP "$(pid_of s2)"
  faults=$((faults + 1))
  sleep "$(awk -v ms="$RKV_LEASE_MS" 'BEGIN { print 3 * ms / 1000 }')"
  kill -CONT "$(pid_of s2)"
  settle 2

  say "kill -9 of kvcoord, restart"
  kill9 kvcoord
  faults=$((faults + 1))
  sleep 1
  bash scripts/cluster.sh restart-coordinator
  settle 2

  say "kill -9 of kvserver s3, restart $comeback"
  kill9 s3
  faults=$((faults + 1))
  sleep 1
  restart s3
  settle 2.5
done

say "faults done; waiting for the load to finish and read everything back"
set +e
wait "$load_pid"
load_status=$?
set -e
load_pid=""
json="$dir/load.json"
[ -s "$json" ] || { cat "$dir/kvbench.log" >&2; echo "run.sh: kvbench wrote no results" >&2; exit 1; }
source tests/lib/kvbench_json.sh
phase_field() { kvbench_field "$json" "$@"; }
acked=$(( $(phase_field load acked_writes) + $(phase_field run acked_writes) ))
run_ops=$(phase_field run operations)
run_errors=$(phase_field run errors)
# Lost: acknowledged writes found absent, by a read during the run or by
# the read-back at the end; wrong reads: values that should not be there.
lost=$(( $(phase_field run lost) + $(phase_field check mismatches) ))
bad_reads=$(( $(phase_field run mismatches) - $(phase_field run lost) ))
checked=$(phase_field check reads_checked)
unreadable=$(phase_field check errors)
grep -E '^\[|^verify|^first|^inserts' "$dir/kvbench.log" || true
echo "operations=$run_ops errors_during_faults=$run_errors wrong_reads=$bad_reads unreadable_at_end=$unreadable (kvbench exit $load_status)"
if [ "${#mix[@]}" -gt 1 ]; then
  echo "inserts=$(phase_field run acked_inserts) (already present $(phase_field run insert_exists))" \
    "deletes=$(phase_field run acked_deletes) (absent $(phase_field run delete_absent))"
fi
[ "$replicas" -gt 1 ] && bash scripts/cluster.sh status | sed -n '/copies of every key/,$p'
echo "faults=$faults acked_writes=$acked keys_checked=$checked wrong_reads=$bad_reads lost=$lost"
[ "$lost" = 0 ] && [ "$bad_reads" = 0 ] && [ "$unreadable" = 0 ] && [ "$checked" -gt 0 ]
