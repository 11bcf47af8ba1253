#!/usr/bin/env bash
# The fault harness: a cluster on loopback under a verifying YCSB load
# (kvbench --verify --check), with faults injected while it runs:
#   kill -9 of a kvserver and its restart from its region file;
#   SIGSTOP of a kvserver past its lease, then SIGCONT;
#   kill -9 of a second client in the middle of its inserts and updates;
#   soft-fabric faults on the verifying client (delays, dropped connections,
#   requests failed with unknown outcome);
# and in the control plane (scripts/cluster.sh runs a three-member etcd and
# two kvcoords, one leading, the other standing by):
#   kill -9 of the leading kvcoord, then its restart;
#   kill -9 of etcd's leader member, then its restart on its data;
#   with --replicas=2 or 3: SIGSTOP of the leading kvcoord for two leases,
#   then SIGCONT; and a rolling restart of every kvcoord (SIGTERM, start
#   again, wait until it has rejoined, the next; the leader last).
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
#                      [--replicas=R [--lose-disk]] [--control-plane] [--expect-no-errors]
#
# --quick (the default; ctest runs it with --deletes): one round of faults,
# about 30 s.
# --long: ten rounds, about 4 minutes. Exit status 0 iff nothing was lost
# and no read was wrong. --lose-region restarts s1 without its region file,
# as a server without one would come back: the harness must then report
# lost writes (ctest checks that it does).
# RKV_FAULT_KEEP=1 keeps the cluster's folder (logs, region files).
# --replicas=R (2 or 3): kvcoord --replicas=R, with R + 1 servers (one
# group and a spare); after each fault the harness waits until every group
# serves with R copies again. --lose-disk: every killed server loses its
# region file before it comes back (it returns blank, as after a lost
# disk, and is copied in again); nothing acknowledged may be lost.
# --control-plane: only the control-plane faults, all four of them, each
# round, with 1500 ms leases and no fabric faults on the load: no operation
# needs to fail; with copies, the group must serve with all of them at the
# end.
# --expect-no-errors: exit non-zero also if any operation of the load
# failed while the faults ran (errors_during_faults above 0), or if a fault
# came after the load had ended. Meant for --control-plane: the other faults
# fail operations by design (a down server's keys fail fast).
# The cluster takes 30 ports from a free block in 26000-30000
# (RKV_PORT_BASE); RKV_ETCD_MEMBERS=0 runs it with the one-process kvcoord
# instead (no etcd: the etcd faults are left out).
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=1
bin=build/bin
lose_region=0
lose_disk=0
replicas=1
control_plane=0
expect_no_errors=0
mix=(--workload=a)
for arg in "$@"; do
  case "$arg" in
    --quick) rounds=1 ;;
    --long) rounds=10 ;;
    --bin=*) bin="${arg#*=}" ;;
    --lose-region) lose_region=1 ;;
    --lose-disk) lose_disk=1 ;;
    --replicas=*) replicas="${arg#*=}" ;;
    --control-plane) control_plane=1 ;;
    --expect-no-errors) expect_no_errors=1 ;;
    --deletes)
      mix=(--workload=a --read_proportion=0.4 --update_proportion=0.3 --insert_proportion=0.15
           --delete_proportion=0.15) ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
[[ "$replicas" =~ ^[123]$ ]] || { echo "run.sh: --replicas must be 1, 2 or 3" >&2; exit 2; }
if [ "$lose_disk" = 1 ] && [ "$replicas" = 1 ]; then
  echo "run.sh: --lose-disk needs --replicas=2 or 3 (one copy cannot survive it: see --lose-region)" >&2
  exit 2
fi
if [ "$control_plane" = 1 ] && [ "$lose_region$lose_disk" != 00 ]; then
  echo "run.sh: --control-plane kills no server: --lose-region and --lose-disk do not apply" >&2
  exit 2
fi
etcd_members="${RKV_ETCD_MEMBERS:-3}"
servers=3
[ "$replicas" -gt 1 ] && servers=$((replicas + 1))
bin="$(cd "$bin" && pwd)"
export RKV_BIN="$bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-fault.XXXXXX)"
# etcd's data on tmpfs (see scripts/cluster.sh): the load's region files
# must not hold etcd's fdatasync up for longer than a lease.
export RKV_ETCD_TMPFS=1
source scripts/lib/proc.sh
# kvcoords at BASE and BASE+1, etcd at BASE+10.. and BASE+20.. (cluster.sh).
RKV_PORT_BASE=$(proc_pick_ports 26000 30000 30)
export RKV_PORT_BASE
unset RKV_COORDINATOR
# RKV_TEST_LEASE_MS lengthens the lease for slow builds (sanitizers). The
# control-plane faults get 1500 ms: etcd takes about its election timeout
# (500 ms, scripts/cluster.sh) to replace its leader, and the coordinators'
# handover must fit in the lease with room to spare (docs/DEPLOY.md,
# "Timing"); with 600 ms a killed leader (kvcoord's or etcd's) made the
# group reconfigure.
default_lease=600
[ "$control_plane" = 0 ] || default_lease=1500
export RKV_LEASE_MS="${RKV_TEST_LEASE_MS:-$default_lease}"
export RKV_SERVER_MEMORY=32MiB
export RKV_REPLICAS="$replicas"
dir="$RKV_CLUSTER_DIR"
victim_pid=""
load_pid=""
cleanup() {
  [ -n "$victim_pid" ] && kill -9 "$victim_pid" 2>/dev/null || true
  [ -n "$load_pid" ] && kill -9 "$load_pid" 2>/dev/null || true
  # stop continues paused processes before it stops them.
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  if [ -n "${RKV_FAULT_KEEP:-}" ]; then
    echo "logs kept in $dir"
  else
    if [ -L "$dir/etcd" ]; then rm -rf "$(readlink "$dir/etcd")"; fi
    rm -rf "$dir"
  fi
}
trap cleanup EXIT

say() { echo "[fault $(date +%T)] $*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
lease_s() { awk -v ms="$RKV_LEASE_MS" -v n="$1" 'BEGIN { print n * ms / 1000 }'; }
faults=0
late_faults=0
# fault: counts one, and notes it if the load has already ended.
fault() {
  faults=$((faults + 1))
  if [ -n "$load_pid" ] && ! proc_alive "$load_pid"; then late_faults=$((late_faults + 1)); fi
}
cluster() { bash scripts/cluster.sh "$@"; }
# cluster_say ARGS: cluster.sh ARGS, its lines as the harness's own.
cluster_say() {
  local out
  out=$(cluster "$@")
  [ -z "$out" ] || while IFS= read -r line; do say "$line"; done <<<"$out"
}
pid_of() { cut -d' ' -f1 "$dir/$1.pid"; }
# kill9 NAME: SIGKILL, then wait until the process is gone.
kill9() { cluster kill "$1"; }
comeback="from its region file"
[ "$lose_disk" = 1 ] && comeback="without its region file (a lost disk)"
# restart ID: the server comes back (blank with --lose-disk).
restart() {
  if [ "$lose_disk" = 1 ]; then rm -f "$dir/$1.region"; fi
  cluster restart-server "$1"
}
# settle SECONDS: replicated, wait until every group serves with all its
# copies again; otherwise give the cluster that long.
settle() {
  if [ "$replicas" -gt 1 ]; then
    cluster wait-serving 1
  else
    sleep "$1"
  fi
}
# settle_control SECONDS: after a control-plane fault, whose effects on the
# servers (fencing themselves, groups reconfiguring) show only after a
# while: a lease first, then as settle.
settle_control() {
  if [ "$replicas" -gt 1 ]; then sleep "$(lease_s 1)"; fi
  settle "$1"
}

# The control-plane faults.
kill_leading_coordinator() {
  say "kill -9 of the leading kvcoord, restart"
  fault
  cluster_say kill kvcoord
  if [ "$ncoordinators" -gt 1 ]; then
    # The standby takes over: how long until one says it leads.
    local t0
    t0=$(now_ms)
    say "$(cluster wait-leader 30) after $(($(now_ms) - t0)) ms"
  else
    sleep 1
  fi
  cluster_say restart-coordinator
  settle_control 2
}
pause_leading_coordinator() {
  say "SIGSTOP of the leading kvcoord for two leases, then SIGCONT"
  fault
  cluster_say pause kvcoord
  sleep "$(lease_s 2)"
  cluster_say resume kvcoord
  settle_control 2
}
kill_etcd_leader() {
  [ "$etcd_members" != 0 ] || return 0
  say "kill -9 of etcd's leader member, restart on its data"
  fault
  cluster_say kill etcd
  if [ "$etcd_members" -gt 1 ]; then
    local t0
    t0=$(now_ms)
    say "etcd: $(cluster leader etcd) leads after $(($(now_ms) - t0)) ms"
  fi
  cluster_say restart-etcd
  settle_control 2
}
rolling_restart_coordinators() {
  say "rolling restart of every kvcoord (SIGTERM, start, rejoin; the leader last)"
  fault
  cluster_say rolling-restart kvcoord
  settle_control 2
}
# control_plane_faults all|cheap: the leader kills, and with all the pause
# and the rolling restart too (those matter where servers fence themselves
# when the coordinator is away: with copies).
control_plane_faults() {
  kill_leading_coordinator
  kill_etcd_leader
  if [ "$1" = all ]; then
    pause_leading_coordinator
    rolling_restart_coordinators
  fi
}

cluster start "$servers"
coordinator_list=$(cluster coordinators)
ncoordinators=$(tr ',' '\n' <<<"$coordinator_list" | wc -l)

# How long the load runs: what a round of faults takes, in seconds and in
# leases (the stalls last so many leases). A fault that comes after the
# load has ended is counted (late_faults).
if [ "$control_plane" = 1 ]; then
  fixed=15 leases=2
  [ "$replicas" = 1 ] || leases=6
elif [ "$replicas" -gt 1 ]; then
  fixed=26 leases=9
else
  fixed=20 leases=3
fi
[ "$etcd_members" != 0 ] || fixed=$((fixed - 4))
per_round=$(awk -v f="$fixed" -v k="$leases" -v ms="$RKV_LEASE_MS" 'BEGIN { print int(f + k * ms / 1000 + 0.999) }')
duration=$((rounds * per_round + 4))

# The verifying load: every read checked, and with --deletes every
# insert's and delete's answer too (an insert brings back a key the thread
# deleted); every acknowledged change read back at the end. Its own
# soft-fabric faults come on top, but for --control-plane.
fabric_faults=(--fabric_faults="delay=0.002,max_delay=3ms,fail=0.0002,drop=0.0001,seed=$RANDOM")
[ "$control_plane" = 0 ] || fabric_faults=()
"$bin/kvbench" "${mix[@]}" --records=4000 --duration="${duration}s" --threads=2 \
  --outstanding=8 --verify --check --check_patience=30s --progress=false \
  --coordinator="$coordinator_list" --json="$dir/load.json" \
  --fabric=soft "${fabric_faults[@]}" \
  >"$dir/kvbench.log" 2>&1 &
load_pid=$!
sleep 3

for round in $(seq 1 "$rounds"); do
  say "round $round of $rounds"
  if [ "$control_plane" = 1 ]; then
    control_plane_faults all
    continue
  fi
  # A second client, on keys of its own, killed in the middle of its writes.
  "$bin/kvbench" --workload=a --key_prefix=victim --records=2000 --duration=60s \
    --outstanding=16 --progress=false --coordinator="$coordinator_list" >/dev/null 2>&1 &
  victim_pid=$!
  sleep 2
  say "kill -9 of a client in the middle of its inserts and updates"
  fault
  kill -9 "$victim_pid"; wait "$victim_pid" 2>/dev/null || true
  victim_pid=""

  say "kill -9 of kvserver s1, restart $comeback"
  fault
  kill9 s1
  sleep 1.5
  if [ "$lose_region" = 1 ]; then rm -f "$dir/s1.region"; fi
  restart s1
  settle 2

  say "SIGSTOP of kvserver s2 past its lease, then SIGCONT"
  fault
  kill -STOP "$(pid_of s2)"
  sleep "$(lease_s 3)"
  kill -CONT "$(pid_of s2)"
  settle 2

  if [ "$replicas" -gt 1 ]; then control_plane_faults all; else control_plane_faults cheap; fi

  say "kill -9 of kvserver s3, restart $comeback"
  fault
  kill9 s3
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
if [ "$late_faults" != 0 ]; then
  echo "late_faults=$late_faults: faults injected after the load had ended (it ran ${duration} s)" >&2
fi
extra_ok=1
# The control plane must have recovered: every group serves with all its copies.
if [ "$control_plane" = 1 ] && [ "$replicas" -gt 1 ] && ! cluster wait-serving 1 2>/dev/null; then
  extra_ok=0
  echo "run.sh: the replica group does not serve with all its copies after the faults" >&2
fi
if [ "$expect_no_errors" = 1 ]; then
  [ "$run_errors" = 0 ] || { extra_ok=0; echo "run.sh: $run_errors operations failed (--expect-no-errors)" >&2; }
  [ "$late_faults" = 0 ] || { extra_ok=0; echo "run.sh: faults came after the load (--expect-no-errors)" >&2; }
fi
echo "faults=$faults acked_writes=$acked keys_checked=$checked wrong_reads=$bad_reads lost=$lost"
[ "$lost" = 0 ] && [ "$bad_reads" = 0 ] && [ "$unreadable" = 0 ] && [ "$checked" -gt 0 ] && [ "$extra_ok" = 1 ]
