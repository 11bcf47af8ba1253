#!/usr/bin/env bash
# Runs a local rkv cluster on loopback: a three-member etcd, two kvcoords
# that keep the cluster's state in it (one leads, elected through etcd; the
# other stands by and serves map reads) and N kvservers on the soft fabric,
# each server's region in a file, so that a killed server comes back with
# its keys.
#
#   scripts/cluster.sh start [N]         etcd, the kvcoords c1 and c2, and N servers (default 3)
#   scripts/cluster.sh status            kvctl status: who leads, etcd's health, the map
#   scripts/cluster.sh stop              stop what start started: servers, kvcoords, then etcd
#   scripts/cluster.sh restart-server ID          start server ID again on its region file
#   scripts/cluster.sh restart-coordinator [cN]   start again every kvcoord (or cN) that is not
#                                                 running, and wait for its port
#   scripts/cluster.sh restart-etcd [eN]          start again every etcd member (or eN) that is
#                                                 not running, on its data, and wait until healthy
#   scripts/cluster.sh kill ID|cN|eN              kill -9, and wait until it is gone
#   scripts/cluster.sh kill kvcoord|etcd          the same to the leading kvcoord, or to etcd's
#                                                 leader member; prints which
#   scripts/cluster.sh term ID|cN|eN|kvcoord|etcd SIGTERM, and wait until it has exited
#   scripts/cluster.sh pause ID|cN|eN|kvcoord|etcd   SIGSTOP (kvcoord, etcd: the leader)
#   scripts/cluster.sh resume ID|cN|eN|kvcoord|etcd  SIGCONT (kvcoord, etcd: every one paused)
#   scripts/cluster.sh rolling-restart kvcoord|etcd  each in turn, the leader last: SIGTERM, start
#                                                 again, wait until it is back, then the next
#   scripts/cluster.sh leader kvcoord|etcd        print which one leads (5 s at most)
#   scripts/cluster.sh wait-leader [SECONDS]      wait (default 30 s) until a kvcoord leads
#   scripts/cluster.sh wait ID up|down            wait (30 s at most) until the map says so
#   scripts/cluster.sh wait-serving [N]           wait (30 s at most) until N replica groups
#                                                 (default: servers / RKV_REPLICAS) serve with
#                                                 all their copies and none is reconfiguring
#   scripts/cluster.sh coordinators               print the kvcoord list (for --coordinator=)
#   scripts/cluster.sh etcd-endpoints             print etcd's client endpoints (for etcdctl)
#   scripts/cluster.sh migrate-to-etcd            a cluster started with RKV_ETCD_MEMBERS=0: start
#                                                 etcd, replace its kvcoord in place by one that
#                                                 imports its state file, then add c2
#
# Ports, all on 127.0.0.1, from RKV_PORT_BASE (default 7400): kvcoords at
# BASE and BASE+1, etcd's client ports at BASE+10.., its peer ports at
# BASE+20.. (7410-7412 and 7420-7422 by default: not etcd's own 2379/2380).
# RKV_COORDINATOR (a comma-separated HOST:PORT list) overrides the kvcoords:
# one is started at each address (c1, c2, ...), and servers and kvctl get
# that list. Without RKV_PORT_BASE, etcd's ports then count from the first
# address's port + 10, or the next free block of 20 ports above it in steps
# of 10 (so that clusters started side by side on nearby ports do not
# collide). Set one of the two, or both consistently. start saves the layout
# (addresses, RKV_LEASE_MS, RKV_REPLICAS) in the cluster folder, and later
# commands use it.
# RKV_ETCD_MEMBERS: etcd members, 3 (default), 1 or 5; 0 runs no etcd and a
# single kvcoord with a state file instead (the one-process coordinator).
# RKV_ETCD_PREFIX (default /rkv): the cluster's key prefix in etcd.
# RKV_ETCD_TMPFS=1: etcd's data on tmpfs (/dev/shm), behind a link
# $dir/etcd, for throwaway clusters (the quickstart, the fault harness).
# RKV_CLUSTER_DIR (default /tmp/rkv-cluster) holds region files, logs, pids,
# etcd's data (etcd/eN) and the cluster token. Needs a build
# (scripts/build.sh); RKV_BIN names another folder of binaries; etcd and
# etcdctl come from PATH (Debian's etcd-server and etcd-client), or
# RKV_ETCD_BIN and RKV_ETCDCTL_BIN.
# The servers' fabric: RKV_FABRIC (default soft), RKV_SERVER_LISTEN (default
# 127.0.0.1:0; for verbs an address of an RDMA interface) and RKV_RDMA_DEVICE.
# RKV_REPLICAS (default 1) copies of every key: kvcoord --replicas.
# RKV_SERVER_FLAGS and RKV_COORD_FLAGS: more flags for kvserver and kvcoord.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${RKV_CLUSTER_DIR:-/tmp/rkv-cluster}"
bin="${RKV_BIN:-build/bin}"
lease_ms="${RKV_LEASE_MS:-1500}"
memory="${RKV_SERVER_MEMORY:-64MiB}"
fabric="${RKV_FABRIC:-soft}"
replicas="${RKV_REPLICAS:-1}"
server_listen="${RKV_SERVER_LISTEN:-127.0.0.1:0}"
rdma_device="${RKV_RDMA_DEVICE:-}"
etcd_bin="${RKV_ETCD_BIN:-etcd}"
etcdctl_bin="${RKV_ETCDCTL_BIN:-etcdctl}"
source scripts/lib/proc.sh

die() { echo "cluster.sh: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# The layout: which addresses this cluster's processes use, its lease and
# its copies. Computed from the environment by start and saved in
# $dir/layout; every other command reads it.

layout_from_env() {
  etcd_members="${RKV_ETCD_MEMBERS:-3}"
  [[ "$etcd_members" =~ ^[0135]$ ]] || die "RKV_ETCD_MEMBERS must be 0, 1, 3 or 5"
  local first
  if [ -n "${RKV_PORT_BASE:-}" ]; then
    base="$RKV_PORT_BASE"
  elif [ -n "${RKV_COORDINATOR:-}" ]; then
    first="${RKV_COORDINATOR%%,*}"
    base="${first##*:}"
  else
    base=7400
  fi
  [[ "$base" =~ ^[0-9]+$ ]] && [ "$base" -ge 1024 ] && [ "$base" -le 65500 ] ||
    die "bad port base '$base' (RKV_PORT_BASE, or the port of RKV_COORDINATOR's first address)"
  if [ -n "${RKV_COORDINATOR:-}" ]; then
    coordinators="$RKV_COORDINATOR"
  elif [ "$etcd_members" = 0 ]; then
    coordinators="127.0.0.1:$base"
  else
    coordinators="127.0.0.1:$base,127.0.0.1:$((base + 1))"
  fi
  [[ "$coordinators" =~ ^[^,:]+:[0-9]+(,[^,:]+:[0-9]+)*$ ]] ||
    die "RKV_COORDINATOR must be HOST:PORT[,HOST:PORT...], not '$coordinators'"
  if [ "$etcd_members" = 0 ] && [[ "$coordinators" == *,* ]]; then
    die "without etcd (RKV_ETCD_MEMBERS=0) there is one kvcoord, not $coordinators"
  fi
  etcd_base=$((base + 10))
  etcd_prefix="${RKV_ETCD_PREFIX:-/rkv}"
  # Every cluster's etcd gets a token of its own, so that members of two
  # clusters never take each other for peers.
  etcd_token="rkv-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
}

save_layout() {
  cat >"$dir/layout" <<EOF
# This cluster's addresses, lease and copies, written by scripts/cluster.sh start.
base=$base
etcd_base=$etcd_base
coordinators=$coordinators
etcd_members=$etcd_members
etcd_prefix=$etcd_prefix
etcd_token=$etcd_token
replicas=$replicas
lease_ms=$lease_ms
EOF
}

load_layout() {
  if [ -f "$dir/layout" ]; then
    base="" etcd_base="" coordinators="" etcd_members="" etcd_prefix="" etcd_token=""
    local key value
    while IFS='=' read -r key value; do
      case "$key" in
        base | etcd_base | coordinators | etcd_members | etcd_prefix | etcd_token | replicas | lease_ms)
          printf -v "$key" '%s' "$value" ;;
      esac
    done <"$dir/layout"
    [ -n "$etcd_base" ] || etcd_base=$((base + 10))
    [ -n "$base" ] && [ -n "$coordinators" ] && [ -n "$etcd_members" ] || die "$dir/layout is incomplete"
  else
    layout_from_env
  fi
}

saved() {  # KEY: its value in the saved layout
  sed -n "s/^$1=//p" "$dir/layout" | tail -n 1
}

coord_names() {
  local i=0 a
  IFS=',' read -ra a <<<"$coordinators"
  for _ in "${a[@]}"; do i=$((i + 1)); echo "c$i"; done
}
coord_count() { coord_names | wc -l; }
coord_addr() {  # $1: cN
  local a
  IFS=',' read -ra a <<<"$coordinators"
  echo "${a[$((${1#c} - 1))]}"
}
is_coord() { [[ "$1" =~ ^c[0-9]+$ ]] && [ "${1#c}" -ge 1 ] && [ "${1#c}" -le "$(coord_count)" ]; }

etcd_names() { [ "$etcd_members" = 0 ] || seq -f 'e%g' 1 "$etcd_members"; }
is_etcd() { [[ "$1" =~ ^e[0-9]+$ ]] && [ "${1#e}" -ge 1 ] && [ "${1#e}" -le "$etcd_members" ]; }
etcd_client_port() { echo $((etcd_base + ${1#e} - 1)); }
etcd_peer_port() { echo $((etcd_base + 10 + ${1#e} - 1)); }
etcd_endpoint() { echo "127.0.0.1:$(etcd_client_port "$1")"; }
etcd_endpoints() {
  local n list=""
  for n in $(etcd_names); do list="${list:+$list,}$(etcd_endpoint "$n")"; done
  echo "$list"
}
etcd_initial_cluster() {
  local n list=""
  for n in $(etcd_names); do list="${list:+$list,}$n=http://127.0.0.1:$(etcd_peer_port "$n")"; done
  echo "$list"
}
need_etcd() { [ "$etcd_members" != 0 ] || die "this cluster runs no etcd (started with RKV_ETCD_MEMBERS=0)"; }

# ---------------------------------------------------------------------------
# Processes. A pid file holds the pid and the process's start time.

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
describe() {  # $1: name: "c1 (127.0.0.1:7400)"
  if is_coord "$1"; then echo "$1 ($(coord_addr "$1"))"
  elif is_etcd "$1"; then echo "$1 ($(etcd_endpoint "$1"))"
  else echo "$1"; fi
}

start_server() {  # $1: id
  local id="$1"
  "$bin/kvserver" --id="$id" --coordinator="$coordinators" --token_file="$dir/token" \
    --fabric="$fabric" --listen="$server_listen" --rdma_device="$rdma_device" \
    --memory="$memory" --region_file="$dir/$id.region" ${RKV_SERVER_FLAGS:-} >>"$dir/$id.log" 2>&1 &
  record_pid "$id" $!
}

start_coordinator() {  # $1: cN
  local name="$1" addr pid
  addr="$(coord_addr "$name")"
  local flags=(--listen="$addr" --lease_ms="$lease_ms" --token_file="$dir/token" --replicas="$replicas")
  if [ "$etcd_members" = 0 ]; then
    flags+=(--state_file="$dir/kvcoord.state")
  else
    flags+=(--etcd="$(etcd_endpoints)" --etcd_prefix="$etcd_prefix" --id="$name")
    # A folder that ran the one-process kvcoord before: its state moves into
    # etcd (ignored once etcd holds state for the prefix).
    [ -f "$dir/kvcoord.state" ] && flags+=(--import_state_file="$dir/kvcoord.state")
  fi
  "$bin/kvcoord" "${flags[@]}" ${RKV_COORD_FLAGS:-} >>"$dir/$name.log" 2>&1 &
  pid=$!
  record_pid "$name" "$pid"
  proc_wait_port "$pid" "$addr" ||
    die "kvcoord $name did not start ($addr in use?): $(tail -n 1 "$dir/$name.log")"
}

# etcd: --heartbeat-interval=50 --election-timeout=500 (ms). The
# coordinators' timing depends on etcd electing a new leader within about a
# second of losing one (the bound: docs/DEPLOY.md, "Timing"); with these, a
# follower starts an election half a second after the leader's last
# heartbeat (on loopback a new leader came 0.5 to 0.9 s after a kill -9).
# --pre-vote: a member that fell behind (its disk stalled on a slow
# fdatasync, as when the region files' dirty pages are written back) asks
# whether it could win before it starts an election, instead of deposing a
# healthy leader — without it one 1.3 s stall became a 2 s outage. Compaction by
# revision keeps the last 1000 revisions (checked every five minutes): the
# history a standby's watch may need to catch up after a short break, and a
# bound on the database whatever the rate of writes, which a time-based
# retention would not give during a storm of reconfigurations.
start_etcd_member() {  # $1: eN
  local name="$1" client peer pid
  client="$(etcd_client_port "$name")"
  peer="$(etcd_peer_port "$name")"
  mkdir -p "$dir/etcd"
  # The --initial-* flags matter only to a member's first start; later
  # starts go on from its data directory.
  "$etcd_bin" --name="$name" --data-dir="$dir/etcd/$name" \
    --listen-client-urls="http://127.0.0.1:$client" --advertise-client-urls="http://127.0.0.1:$client" \
    --listen-peer-urls="http://127.0.0.1:$peer" --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
    --initial-cluster="$(etcd_initial_cluster)" --initial-cluster-token="$etcd_token" \
    --initial-cluster-state=new \
    --heartbeat-interval=50 --election-timeout=500 --pre-vote \
    --auto-compaction-mode=revision --auto-compaction-retention=1000 \
    --logger=zap --log-outputs="$dir/$name.log" >>"$dir/$name.log" 2>&1 &
  pid=$!
  record_pid "$name" "$pid"
  proc_wait_port "$pid" "127.0.0.1:$client" ||
    die "etcd member $name did not start (port $client or $peer in use?): $(tail -n 1 "$dir/$name.log")"
}

etcdctl_() {  # etcdctl with short deadlines, bounded as a whole
  timeout 10 "$etcdctl_bin" --dial-timeout=1s --command-timeout=2s "$@"
}

# wait_etcd_healthy ENDPOINTS [SECONDS]: until every endpoint in the list
# commits a read through the cluster (etcdctl endpoint health).
wait_etcd_healthy() {
  local deadline=$((SECONDS + ${2:-30}))
  until etcdctl_ --endpoints="$1" endpoint health >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# The etcd member that leads (eN), from `etcdctl endpoint status` of the
# members that run (a dead or paused one would cost a timeout): the one
# whose member_id is the leader the members report; empty if none does.
etcd_leader_now() {
  local endpoint port n list=""
  for n in $(etcd_names); do
    alive "$n" && [ "$(proc_state "$(pid_of "$n")")" != T ] && list="${list:+$list,}$(etcd_endpoint "$n")"
  done
  [ -n "$list" ] || return 0
  endpoint=$(etcdctl_ --endpoints="$list" endpoint status -w json 2>/dev/null |
    python3 -c '
import json, sys
try:
    members = json.load(sys.stdin)
except ValueError:
    sys.exit()
for m in members:
    status = m.get("Status", {})
    if status.get("leader") and status.get("header", {}).get("member_id") == status["leader"]:
        print(m["Endpoint"])
        break' || true)
  [ -n "$endpoint" ] || return 0
  port="${endpoint##*:}"
  echo "e$((port - etcd_base + 1))"
}

# kvctl_wait SECONDS CONDITION...: kvctl wait (exit 0 once the condition
# holds, 1 with what it last saw on stderr after SECONDS, 2 for a bad
# condition); it prints what it saw when it held.
kvctl_wait() {
  local secs="$1"
  shift
  timeout $((secs + 15)) "$bin/kvctl" --coordinator="$coordinators" --token_file="$dir/token" \
    wait "$@" --timeout="${secs}s"
}

# coord_name ID ADDRESS: the kvcoord's name (cN), from its id (cluster.sh
# starts each with --id=cN) or else its address; the id if neither is ours.
coord_name() {
  local n
  if is_coord "$1"; then echo "$1"; return 0; fi
  for n in $(coord_names); do
    [ "$(coord_addr "$n")" = "$2" ] && { echo "$n"; return 0; }
  done
  echo "$1"
}

# leading_coordinator [SECONDS]: the kvcoord that leads (cN), waiting up to
# SECONDS (default 5) for one to say so; fails if none does. One kvcoord:
# that one.
leading_coordinator() {
  if [ "$(coord_count)" = 1 ]; then echo c1; return 0; fi
  local seen id addr name
  seen=$(kvctl_wait "${1:-5}" leader 2>/dev/null) || return 1
  read -r id addr _ <<<"$seen"
  name=$(coord_name "$id" "$addr")
  alive "$name" || return 1
  echo "$name"
}

# wait_coordinator_role cN [SECONDS]: until kvctl lists cN as leader or
# standby (it has joined: it has read the state from etcd, hears from the
# leader and serves maps; "starting" until then).
wait_coordinator_role() {
  [ "$(coord_count)" = 1 ] && return 0
  kvctl_wait "${2:-30}" coordinator "$(coord_addr "$1")" --role=leader,standby >/dev/null
}

etcd_leader() {  # [SECONDS]: eN, waiting up to SECONDS (default 5); fails if none
  local deadline=$((SECONDS + ${1:-5})) leader
  while :; do
    leader=$(etcd_leader_now)
    if [ -n "$leader" ] && alive "$leader"; then echo "$leader"; return 0; fi
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# resolve NAME: kvcoord → the leading kvcoord (when none says so, the first
# that runs, c1 first), etcd → etcd's leader member; anything else as it is.
resolve() {
  case "$1" in
    kvcoord)
      local n fallback=""
      leading_coordinator 5 && return 0
      for n in $(coord_names); do alive "$n" && { fallback="$n"; break; }; done
      echo "cluster.sh: no kvcoord says it leads; taking ${fallback:=c1}" >&2
      echo "$fallback"
      ;;
    etcd)
      need_etcd
      etcd_leader 5 || die "no etcd member says it leads"
      ;;
    *) echo "$1" ;;
  esac
}

kill_and_wait() {  # $1: name, $2: signal
  local pid start
  [ -f "$dir/$1.pid" ] || die "no process $1 in this cluster"
  read -r pid start <"$dir/$1.pid"
  if proc_alive "$pid" "$start"; then
    # A stopped process takes SIGTERM only once it runs again.
    [ "$2" = KILL ] || kill -CONT "$pid" 2>/dev/null || true
    kill "-$2" "$pid" 2>/dev/null || true
  fi
  proc_wait_gone "$pid" "$start" || die "$1 (pid $pid) did not exit after SIG$2"
}

restart_coordinators() {  # [cN]: start again those not running; fails if none
  local names n started=0
  if [ -n "${1:-}" ]; then
    is_coord "$1" || die "no kvcoord $1 in this cluster ($(coord_names | tr '\n' ' '))"
    alive "$1" && die "kvcoord $1 is running"
    names="$1"
  else
    names=$(coord_names)
  fi
  for n in $names; do
    alive "$n" && continue
    start_coordinator "$n"
    echo "restarted kvcoord $(describe "$n")"
    started=1
  done
  [ "$started" = 1 ] || die "every kvcoord is running"
}

restart_etcd_members() {  # [eN]: start again those not running, wait until healthy
  need_etcd
  local names n started=""
  if [ -n "${1:-}" ]; then
    is_etcd "$1" || die "no etcd member $1 in this cluster ($(etcd_names | tr '\n' ' '))"
    alive "$1" && die "etcd member $1 is running"
    names="$1"
  else
    names=$(etcd_names)
  fi
  for n in $names; do
    alive "$n" && continue
    start_etcd_member "$n"
    started="$started $n"
  done
  [ -n "$started" ] || die "every etcd member is running"
  for n in $started; do
    wait_etcd_healthy "$(etcd_endpoint "$n")" 30 ||
      die "etcd member $n is not healthy after 30 s: $(tail -n 1 "$dir/$n.log")"
    echo "restarted etcd member $(describe "$n"): healthy"
  done
}

# ---------------------------------------------------------------------------
# The map, as kvctl reports it.

# wait_servers STATE ID...: until the map lists every server ID in STATE
# (up or down), 30 s at most for them all.
wait_servers() {
  local state="$1" deadline=$((SECONDS + 30)) id
  shift
  for id in "$@"; do
    kvctl_wait $((deadline > SECONDS ? deadline - SECONDS : 0)) server "$id" --state="$state" \
      >/dev/null || return 1
  done
}

# wait_serving N: until at least N replica groups serve with all their
# copies and none is reconfiguring, 30 s at most (N = 0: at once).
wait_serving() {
  [ "$1" -gt 0 ] || return 0
  kvctl_wait 30 serving --groups="$1" >/dev/null
}

# stop_group SECONDS NAME...: SIGTERM to each (continued first, should it be
# paused), then wait; what is still there after SECONDS gets SIGKILL.
stop_group() {
  local grace="$1" name pid start
  shift
  for name in "$@"; do
    if alive "$name"; then
      kill -CONT "$(pid_of "$name")" 2>/dev/null || true
      kill "$(pid_of "$name")" 2>/dev/null || true
    fi
  done
  for name in "$@"; do
    read -r pid start <"$dir/$name.pid"
    if ! proc_wait_gone "$pid" "$start" "$grace"; then
      kill -9 "$pid" 2>/dev/null || true
      proc_wait_gone "$pid" "$start" || die "$name (pid $pid) did not die"
    fi
    rm -f "$dir/$name.pid"
  done
}

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 2
}

cmd="${1:-}"
case "$cmd" in
  start)
    n="${2:-3}"
    [[ "$n" =~ ^[1-9][0-9]?$ ]] || die "start takes a server count from 1 to 99"
    [ -x "$bin/kvserver" ] || die "no build: run scripts/build.sh first"
    mkdir -p "$dir"
    for pidfile in "$dir"/*.pid; do
      [ -f "$pidfile" ] || continue
      alive "$(basename "$pidfile" .pid)" && die "already running (scripts/cluster.sh stop first)"
    done
    layout_from_env
    if [ "$etcd_members" != 0 ]; then
      command -v "$etcd_bin" >/dev/null && command -v "$etcdctl_bin" >/dev/null ||
        die "no etcd: apt-get install etcd-server etcd-client (scripts/install-deps.sh), or RKV_ETCD_MEMBERS=0"
      # etcd's data from an earlier start goes on with the addresses and the
      # token it was made with: the saved layout, unless the environment
      # names ports, and then they must be the same.
      if [ -d "$dir/etcd" ] && [ -f "$dir/layout" ]; then
        if [ -z "${RKV_PORT_BASE:-}${RKV_COORDINATOR:-}${RKV_ETCD_MEMBERS:-}" ]; then
          base=$(saved base) coordinators=$(saved coordinators) etcd_members=$(saved etcd_members)
          etcd_prefix="${RKV_ETCD_PREFIX:-$(saved etcd_prefix)}"
        fi
        [ "$base" = "$(saved base)" ] && [ "$etcd_members" = "$(saved etcd_members)" ] ||
          die "$dir/etcd holds a cluster of $(saved etcd_members) members at base port $(saved base); start with those (RKV_PORT_BASE, RKV_ETCD_MEMBERS) or remove $dir/etcd"
        etcd_token=$(saved etcd_token)
        etcd_base=$(saved etcd_base)
        etcd_base="${etcd_base:-$((base + 10))}"
      elif [ -n "${RKV_COORDINATOR:-}" ] && [ -z "${RKV_PORT_BASE:-}" ]; then
        # Ports named by RKV_COORDINATOR alone (as scripts that start several
        # clusters side by side give them): etcd takes the first free block
        # of 20 ports from the first address's port + 10 on, in steps of 10.
        etcd_base=$((base + 10))
        until [ -z "$(ss -Htan "( sport >= :$etcd_base and sport <= :$((etcd_base + 19)) )" 2>/dev/null)" ]; do
          etcd_base=$((etcd_base + 10))
          [ "$etcd_base" -le $((base + 300)) ] && [ "$etcd_base" -le 65515 ] ||
            die "no 20 free ports in a row for etcd above $base: set RKV_PORT_BASE"
        done
      fi
    fi
    [ -f "$dir/token" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token"
    chmod 600 "$dir/token"
    save_layout
    # RKV_ETCD_TMPFS=1: etcd's data on tmpfs behind $dir/etcd, for a
    # throwaway cluster (the quickstart's, the fault harness's). An etcd
    # that shares a disk with the region files can wait a second or more
    # on fdatasync while their dirty pages are written back, longer than a
    # 1.5 s lease lets the coordinators ride out; a production etcd gets a
    # disk of its own (docs/DEPLOY.md).
    if [ "$etcd_members" != 0 ] && [ -n "${RKV_ETCD_TMPFS:-}" ] && [ ! -e "$dir/etcd" ] &&
      [ -d /dev/shm ] && [ -w /dev/shm ]; then
      ln -s "$(mktemp -d /dev/shm/rkv-etcd.XXXXXX)" "$dir/etcd"
    fi
    for e in $(etcd_names); do start_etcd_member "$e"; done
    if [ "$etcd_members" != 0 ] && ! wait_etcd_healthy "$(etcd_endpoints)" 30; then
      tail -n 3 "$dir"/e*.log >&2
      die "etcd is not healthy after 30 s; logs are in $dir"
    fi
    for c in $(coord_names); do start_coordinator "$c"; done
    for i in $(seq 1 "$n"); do start_server "s$i"; done
    echo "$n" >"$dir/servers"
    if ! wait_servers up $(seq -f 's%g' 1 "$n") || ! wait_serving $((n / replicas)); then
      tail -n 5 "$dir"/*.log >&2
      die "the cluster did not come up; logs are in $dir"
    fi
    if [ "$etcd_members" = 0 ]; then
      echo "cluster up: kvcoord $coordinators (state file, no etcd), $n servers, $replicas copies of every key, files in $dir"
    else
      echo "cluster up: etcd $(etcd_endpoints) ($etcd_members members), kvcoords $coordinators, $n servers, $replicas copies of every key, files in $dir"
    fi
    ;;
  status)
    load_layout
    exec "$bin/kvctl" status --coordinator="$coordinators" --token_file="$dir/token" "${@:2}"
    ;;
  coordinators)
    load_layout
    echo "$coordinators"
    ;;
  etcd-endpoints)
    load_layout
    need_etcd
    etcd_endpoints
    ;;
  restart-server)
    load_layout
    id="${2:-}"
    [ -n "$id" ] && [ -f "$dir/$id.pid" ] && ! is_coord "$id" && ! is_etcd "$id" ||
      die "restart-server needs the id of a server of this cluster"
    alive "$id" && die "server $id is running"
    start_server "$id"
    ;;
  restart-coordinator)
    load_layout
    restart_coordinators "${2:-}"
    ;;
  restart-etcd)
    load_layout
    restart_etcd_members "${2:-}"
    ;;
  kill | term)
    load_layout
    [ -n "${2:-}" ] || die "$cmd needs kvcoord, etcd, cN, eN or a server id of this cluster"
    name=$(resolve "$2")
    [ -f "$dir/$name.pid" ] || die "$cmd needs kvcoord, etcd, cN, eN or a server id of this cluster"
    signal=KILL
    [ "$cmd" = term ] && signal=TERM
    kill_and_wait "$name" "$signal"
    done_word=killed
    [ "$cmd" = term ] && done_word=stopped
    case "$2" in
      kvcoord) echo "$done_word the leading kvcoord, $(describe "$name")" ;;
      etcd) echo "$done_word etcd's leader, $(describe "$name")" ;;
      *) [ "$cmd" = kill ] || echo "$done_word $(describe "$name")" ;;
    esac
    ;;
  pause)
    load_layout
    [ -n "${2:-}" ] || die "pause needs kvcoord, etcd, cN, eN or a server id of this cluster"
    name=$(resolve "$2")
    alive "$name" || die "$name is not running"
    kill -STOP "$(pid_of "$name")"
    proc_wait_stopped "$(pid_of "$name")" || die "$name did not stop"
    echo "paused $(describe "$name")"
    ;;
  resume)
    load_layout
    [ -n "${2:-}" ] || die "resume needs kvcoord, etcd, cN, eN or a server id of this cluster"
    case "$2" in
      kvcoord) names=$(coord_names) ;;
      etcd) need_etcd; names=$(etcd_names) ;;
      *) names="$2"; [ -f "$dir/$2.pid" ] || die "no process $2 in this cluster" ;;
    esac
    for name in $names; do
      alive "$name" || continue
      pid=$(pid_of "$name")
      [ "$(proc_state "$pid")" = T ] || continue
      kill -CONT "$pid"
      proc_wait_stopped --cont "$pid" || die "$name did not continue"
      echo "resumed $(describe "$name")"
    done
    ;;
  rolling-restart)
    load_layout
    case "${2:-}" in
      kvcoord)
        leader=$(leading_coordinator 5 || true)
        for name in $(coord_names | grep -vx "${leader:-none}") $leader; do
          alive "$name" && kill_and_wait "$name" TERM
          start_coordinator "$name"
          wait_coordinator_role "$name" 30 || die "kvcoord $name did not rejoin within 30 s"
          echo "restarted kvcoord $(describe "$name")"
        done
        ;;
      etcd)
        need_etcd
        leader=$(etcd_leader 5 || true)
        for name in $(etcd_names | grep -vx "${leader:-none}") $leader; do
          alive "$name" && kill_and_wait "$name" TERM
          start_etcd_member "$name"
          wait_etcd_healthy "$(etcd_endpoint "$name")" 30 || die "etcd member $name is not healthy after 30 s"
          echo "restarted etcd member $(describe "$name")"
        done
        ;;
      *) die "rolling-restart needs kvcoord or etcd" ;;
    esac
    ;;
  leader)
    load_layout
    case "${2:-}" in
      kvcoord) name=$(leading_coordinator 5) || die "no kvcoord says it leads" ;;
      etcd) need_etcd; name=$(etcd_leader 5) || die "no etcd member says it leads" ;;
      *) die "leader needs kvcoord or etcd" ;;
    esac
    describe "$name"
    ;;
  wait-leader)
    load_layout
    secs="${2:-30}"
    [[ "$secs" =~ ^[0-9]+$ ]] || die "wait-leader takes a number of seconds"
    # The one-process coordinator leads once it answers.
    seen=$(kvctl_wait "$secs" leader) || die "no kvcoord leads after $secs s"
    read -r id addr _ <<<"$seen"
    name=$(coord_name "$id" "$addr")
    echo "$(describe "$name") leads"
    ;;
  wait)
    load_layout
    id="${2:-}" state="${3:-}"
    [ -n "$id" ] && [[ "$state" =~ ^(up|down)$ ]] || die "wait needs a server id and up or down"
    wait_servers "$state" "$id" || die "server $id is not $state after 30 s"
    ;;
  wait-serving)
    load_layout
    want="${2:-$(($(cat "$dir/servers") / replicas))}"
    wait_serving "$want" || die "$want replica groups do not serve after 30 s"
    ;;
  migrate-to-etcd)
    load_layout
    [ "$etcd_members" = 0 ] || die "this cluster already keeps its state in etcd"
    alive c1 || die "kvcoord c1 is not running"
    [ -f "$dir/kvcoord.state" ] || die "no $dir/kvcoord.state to import"
    command -v "$etcd_bin" >/dev/null && command -v "$etcdctl_bin" >/dev/null ||
      die "no etcd: apt-get install etcd-server etcd-client"
    [ ! -d "$dir/etcd" ] || die "$dir/etcd exists already; remove it first"
    old_coordinators="$coordinators"
    etcd_members="${RKV_ETCD_MEMBERS:-3}"
    [[ "$etcd_members" =~ ^[135]$ ]] || die "RKV_ETCD_MEMBERS must be 1, 3 or 5 to migrate"
    etcd_prefix="${RKV_ETCD_PREFIX:-/rkv}"
    etcd_token="rkv-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    for e in $(etcd_names); do start_etcd_member "$e"; done
    wait_etcd_healthy "$(etcd_endpoints)" 30 || die "etcd is not healthy after 30 s; logs are in $dir"
    echo "etcd up: $(etcd_endpoints)"
    # The new kvcoord takes the old one's address, within a fraction of a
    # lease: servers keep their registrations, and no group reconfigures.
    t0=$(date +%s%N)
    kill_and_wait c1 TERM
    start_coordinator c1
    echo "c1 replaced in place by an etcd-backed kvcoord that imports $dir/kvcoord.state: $((($(date +%s%N) - t0) / 1000000)) ms without a kvcoord (lease $lease_ms ms)"
    wait_coordinator_role c1 30 || true
    coordinators="$old_coordinators,127.0.0.1:$((base + 1))"
    save_layout
    start_coordinator c2
    echo "kvcoords $coordinators; servers get the list when they next restart (restart-server)"
    ;;
  stop)
    load_layout
    servers=() coords=() members=()
    for pidfile in "$dir"/*.pid; do
      [ -f "$pidfile" ] || continue
      name=$(basename "$pidfile" .pid)
      if [[ "$name" =~ ^e[0-9]+$ ]]; then members+=("$name")
      elif [[ "$name" =~ ^c[0-9]+$ ]] || [ "$name" = kvcoord ]; then coords+=("$name")
      else servers+=("$name"); fi
    done
    # Servers first (they deregister with the coordinator), then the
    # coordinators, then etcd, which they keep their state in.
    stop_group 5 "${servers[@]}"
    stop_group 5 "${coords[@]}"
    stop_group 10 "${members[@]}"
    echo "cluster stopped (region files$([ -d "$dir/etcd" ] && echo " and etcd's data") kept in $dir)"
    ;;
  *)
    usage
    ;;
esac
