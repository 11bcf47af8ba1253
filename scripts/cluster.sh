#!/usr/bin/env bash
# Runs a local rkv cluster on loopback: one kvcoord and N kvservers on the
# soft fabric, each server's region in a file, so that a killed server comes
# back with its keys.
#
#   scripts/cluster.sh start [N]     start a coordinator and N servers (default 3)
#   scripts/cluster.sh status        kvctl status
#   scripts/cluster.sh stop          stop what start started (and nothing else)
#   scripts/cluster.sh restart-server ID   start server ID again on its region file
#   scripts/cluster.sh restart-coordinator start kvcoord again (after it died)
#   scripts/cluster.sh kill ID|kvcoord     kill -9, and wait until it is gone
#   scripts/cluster.sh wait ID up|down     wait (30 s at most) until the map says so
#   scripts/cluster.sh wait-serving [N]    wait (30 s at most) until N replica groups
#                                          (default: servers / RKV_REPLICAS) serve with
#                                          all their copies and none is reconfiguring
#
# RKV_CLUSTER_DIR (default /tmp/rkv-cluster) holds region files, logs, pids
# and the cluster token. The coordinator listens on 127.0.0.1:7400, where
# kvctl looks by default (RKV_COORDINATOR moves it). Needs a build
# (scripts/build.sh); RKV_BIN names another folder of binaries.
# The servers' fabric: RKV_FABRIC (default soft), RKV_SERVER_LISTEN (default
# 127.0.0.1:0; for verbs an address of an RDMA interface) and RKV_RDMA_DEVICE.
# RKV_REPLICAS (default 1) copies of every key: kvcoord --replicas.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${RKV_CLUSTER_DIR:-/tmp/rkv-cluster}"
coordinator="${RKV_COORDINATOR:-127.0.0.1:7400}"
bin="${RKV_BIN:-build/bin}"
lease_ms="${RKV_LEASE_MS:-1500}"
memory="${RKV_SERVER_MEMORY:-64MiB}"
fabric="${RKV_FABRIC:-soft}"
replicas="${RKV_REPLICAS:-1}"
server_listen="${RKV_SERVER_LISTEN:-127.0.0.1:0}"
rdma_device="${RKV_RDMA_DEVICE:-}"
source scripts/lib/proc.sh

die() { echo "cluster.sh: $*" >&2; exit 1; }

# A pid file holds the pid and the process's start time.
pid_of() { cut -d' ' -f1 "$dir/$1.pid"; }
alive() {  # $1: name
  [ -f "$dir/$1.pid" ] || return 1
  local pid start
  read -r pid start <"$dir/$1.pid"
  proc_alive "$pid" "$start"
}
record_pid() {  # $1: name, $2: pid
  echo "$2 $(proc_start_time "$2")" >"$dir/$1.pid"
}

start_server() {  # $1: id
  local id="$1"
  "$bin/kvserver" --id="$id" --coordinator="$coordinator" --token_file="$dir/token" \
    --fabric="$fabric" --listen="$server_listen" --rdma_device="$rdma_device" \
    --memory="$memory" --region_file="$dir/$id.region" ${RKV_SERVER_FLAGS:-} >>"$dir/$id.log" 2>&1 &
  record_pid "$id" $!
}

start_coordinator() {
  "$bin/kvcoord" --listen="$coordinator" --lease_ms="$lease_ms" --token_file="$dir/token" \
    --state_file="$dir/kvcoord.state" --replicas="$replicas" >>"$dir/kvcoord.log" 2>&1 &
  local pid=$!
  record_pid kvcoord "$pid"
  proc_wait_port "$pid" "$coordinator" ||
    die "kvcoord did not start ($coordinator in use?): $(tail -n 1 "$dir/kvcoord.log")"
}

# How many servers the map has in state $1, or with $2 given, whether
# server $2 is in state $1.
map_count() {
  "$bin/kvctl" status --json --coordinator="$coordinator" --token_file="$dir/token" 2>/dev/null |
    grep -o "\"id\": \"${2:-[^\"]*}\"[^}]*\"state\": \"$1\"" | wc -l || true
}

wait_map() {  # $1: state, $2: at least this many servers in it, $3: server id (optional)
  local deadline=$((SECONDS + 30))
  until [ "$(map_count "$1" "${3:-}")" -ge "$2" ]; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# Replica groups serving with all their copies; 0 while one is reconfiguring.
groups_serving() {
  local json
  json=$("$bin/kvctl" status --json --coordinator="$coordinator" --token_file="$dir/token" 2>/dev/null) || {
    echo 0
    return
  }
  if grep -q '"state": "reconfiguring"' <<<"$json"; then echo 0; return; fi
  grep -o "\"state\": \"serving\", \"copies\": $replicas," <<<"$json" | wc -l
}

wait_serving() {  # $1: at least this many groups serving, none reconfiguring
  local deadline=$((SECONDS + 30))
  until [ "$(groups_serving)" -ge "$1" ]; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

case "${1:-}" in
  start)
    n="${2:-3}"
    [[ "$n" =~ ^[1-9][0-9]?$ ]] || die "start takes a server count from 1 to 99"
    [ -x "$bin/kvserver" ] || die "no build: run scripts/build.sh first"
    mkdir -p "$dir"
    alive kvcoord && die "already running (scripts/cluster.sh stop first)"
    [ -f "$dir/token" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token"
    chmod 600 "$dir/token"
    start_coordinator
    for i in $(seq 1 "$n"); do start_server "s$i"; done
    echo "$n" >"$dir/servers"
    if ! wait_map up "$n" || ! wait_serving $((n / replicas)); then
      tail -n 5 "$dir"/*.log >&2
      die "the cluster did not come up; logs are in $dir"
    fi
    echo "cluster up: coordinator $coordinator, $n servers, $replicas copies of every key, files in $dir"
    ;;
  status)
    exec "$bin/kvctl" status --coordinator="$coordinator" --token_file="$dir/token" "${@:2}"
    ;;
  restart-server)
    id="${2:-}"
    [ -n "$id" ] && [ -f "$dir/$id.pid" ] || die "restart-server needs the id of a server of this cluster"
    alive "$id" && die "server $id is running"
    start_server "$id"
    ;;
  restart-coordinator)
    alive kvcoord && die "kvcoord is running"
    start_coordinator
    ;;
  kill)
    name="${2:-}"
    [ -n "$name" ] && [ -f "$dir/$name.pid" ] || die "kill needs kvcoord or a server id of this cluster"
    read -r pid start <"$dir/$name.pid"
    if proc_alive "$pid" "$start"; then kill -9 "$pid" 2>/dev/null || true; fi
    proc_wait_gone "$pid" "$start" || die "$name (pid $pid) did not die"
    ;;
  wait)
    id="${2:-}" state="${3:-}"
    [ -n "$id" ] && [[ "$state" =~ ^(up|down)$ ]] || die "wait needs a server id and up or down"
    wait_map "$state" 1 "$id" || die "server $id is not $state after 30 s"
    ;;
  wait-serving)
    want="${2:-$(($(cat "$dir/servers") / replicas))}"
    wait_serving "$want" || die "$want replica groups do not serve after 30 s"
    ;;
  stop)
    for pidfile in "$dir"/*.pid; do
      [ -f "$pidfile" ] || continue
      name=$(basename "$pidfile" .pid)
      if alive "$name"; then kill "$(pid_of "$name")" 2>/dev/null || true; fi
    done
    for pidfile in "$dir"/*.pid; do
      [ -f "$pidfile" ] || continue
      name=$(basename "$pidfile" .pid)
      read -r pid start <"$pidfile"
      if ! proc_wait_gone "$pid" "$start" 5; then
        kill -9 "$pid" 2>/dev/null || true
        proc_wait_gone "$pid" "$start" || die "$name (pid $pid) did not die"
      fi
      rm -f "$pidfile"
    done
    echo "cluster stopped (region files kept in $dir)"
    ;;
  *)
    sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
