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
#
# RKV_CLUSTER_DIR (default /tmp/rkv-cluster) holds region files, logs, pids
# and the cluster token. The coordinator listens on 127.0.0.1:7400, where
# kvctl looks by default (RKV_COORDINATOR moves it). Needs a build
# (scripts/build.sh); RKV_BIN names another folder of binaries.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${RKV_CLUSTER_DIR:-/tmp/rkv-cluster}"
coordinator="${RKV_COORDINATOR:-127.0.0.1:7400}"
bin="${RKV_BIN:-build/bin}"
lease_ms="${RKV_LEASE_MS:-1500}"
memory="${RKV_SERVER_MEMORY:-64MiB}"

die() { echo "cluster.sh: $*" >&2; exit 1; }

# Running, and not a zombie waiting to be reaped.
alive() {
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null &&
    ! grep -qs '^State:.*Z' "/proc/$(cat "$1")/status"
}

start_server() {  # $1: id
  local id="$1"
  "$bin/kvserver" --id="$id" --coordinator="$coordinator" --token_file="$dir/token" \
    --fabric=soft --memory="$memory" --region_file="$dir/$id.region" \
    >>"$dir/$id.log" 2>&1 &
  echo $! >"$dir/$id.pid"
}

start_coordinator() {
  "$bin/kvcoord" --listen="$coordinator" --lease_ms="$lease_ms" --token_file="$dir/token" \
    >>"$dir/kvcoord.log" 2>&1 &
  echo $! >"$dir/kvcoord.pid"
  sleep 0.3
  alive "$dir/kvcoord.pid" ||
    die "kvcoord did not start ($coordinator in use?): $(tail -n 1 "$dir/kvcoord.log")"
}

wait_up() {  # $1: how many servers must be up
  for _ in $(seq 100); do
    local up
    up=$("$bin/kvctl" status --json --coordinator="$coordinator" --token_file="$dir/token" 2>/dev/null |
      grep -o '"state": "up"' | wc -l || true)
    [ "$up" -ge "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

case "${1:-}" in
  start)
    n="${2:-3}"
    [[ "$n" =~ ^[1-9][0-9]?$ ]] || die "start takes a server count from 1 to 99"
    [ -x "$bin/kvserver" ] || die "no build: run scripts/build.sh first"
    mkdir -p "$dir"
    alive "$dir/kvcoord.pid" && die "already running (scripts/cluster.sh stop first)"
    [ -f "$dir/token" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token"
    chmod 600 "$dir/token"
    start_coordinator
    for i in $(seq 1 "$n"); do start_server "s$i"; done
    echo "$n" >"$dir/servers"
    if ! wait_up "$n"; then
      tail -n 5 "$dir"/*.log >&2
      die "the cluster did not come up; logs are in $dir"
    fi
    echo "cluster up: coordinator $coordinator, $n servers, files in $dir"
    ;;
  status)
    exec "$bin/kvctl" status --coordinator="$coordinator" --token_file="$dir/token" "${@:2}"
    ;;
  restart-server)
    id="${2:-}"
    [ -n "$id" ] && [ -f "$dir/$id.pid" ] || die "restart-server needs the id of a server of this cluster"
    alive "$dir/$id.pid" && die "server $id is running"
    start_server "$id"
    ;;
  restart-coordinator)
    alive "$dir/kvcoord.pid" && die "kvcoord is running"
    start_coordinator
    ;;
  stop)
    for pidfile in "$dir"/*.pid; do
      [ -f "$pidfile" ] || continue
      if alive "$pidfile"; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
    done
    for pidfile in "$dir"/*.pid; do
      [ -f "$pidfile" ] || continue
      for _ in $(seq 50); do alive "$pidfile" || break; sleep 0.1; done
      alive "$pidfile" && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
      rm -f "$pidfile"
    done
    echo "cluster stopped (region files kept in $dir)"
    ;;
  *)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
