#!/usr/bin/env bash
# kvbench end to end: a local cluster (scripts/cluster.sh), memcached and
# Redis on loopback, and short runs of workloads with --verify against each.
# Each run must exit 0 and write JSON with a positive throughput and read
# percentiles. Everything started here is stopped here.
#
#   tests/bench/kvbench_e2e.sh BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh
source tests/lib/kvbench_json.sh
bin="$(cd "${1:?usage: kvbench_e2e.sh BIN_DIR}" && pwd)"
export RKV_BIN="$bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-kvbench-e2e.XXXXXX)"
# Ports off the defaults, so that a cluster or servers of the user's own
# are not disturbed.
base=$(proc_pick_ports 20000 24000)
export RKV_COORDINATOR="127.0.0.1:$base"
export RKV_SERVER_MEMORY=32MiB
mc_port=$((base + 1))
redis_port=$((base + 2))
pids=()
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT

fail() { echo "kvbench_e2e: $*" >&2; exit 1; }

# run NAME ARGS...: one kvbench run; checks exit status and JSON.
run() {
  local name="$1" json="$RKV_CLUSTER_DIR/$1.json"
  shift
  echo "--- $name: kvbench $*"
  timeout 120 "$bin/kvbench" --progress=false --verify --json="$json" "$@" ||
    fail "$name: kvbench exited with $?"
  python3 - "$json" <<'EOF' || fail "$name: $json is not what it should be"
import json, sys
run = json.load(open(sys.argv[1]))["run"]
problems = []
if not run["throughput_ops"] > 0:
    problems.append("no positive throughput_ops")
for p in ("p50", "p99", "p999"):
    if p not in run["latency_us"].get("read", {}):
        problems.append(f"no read latency {p}")
if run["verify"]["mismatches"] != 0:
    problems.append(f"{run['verify']['mismatches']} mismatches")
for problem in problems:
    print(problem, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
}

bash scripts/cluster.sh start 2
common=(--records=3000 --operations=12000 --threads=2 --outstanding=8)
run rkv-a --driver=rkv --coordinator="$RKV_COORDINATOR" --workload=a "${common[@]}"
run rkv-d --driver=rkv --coordinator="$RKV_COORDINATOR" --workload=d "${common[@]}"
run rkv-f --driver=rkv --coordinator="$RKV_COORDINATOR" --workload=f "${common[@]}"
# rkv Inserts and Deletes mixed in, every answer checked.
run rkv-deletes --driver=rkv --coordinator="$RKV_COORDINATOR" --workload=a --insert_proportion=0.1 \
  --delete_proportion=0.1 --key_prefix=del "${common[@]}"
[ "$(kvbench_field "$RKV_CLUSTER_DIR/rkv-deletes.json" run acked_deletes)" -gt 0 ] ||
  fail "rkv-deletes: no deletes"
# The run phase alone, over the keys loaded above, bounded by time.
run rkv-c --driver=rkv --coordinator="$RKV_COORDINATOR" --workload=c --phase=run \
  --records=3000 --duration=2s --target_ops=2000

# A wrong flag is refused with a reason and exit status 2.
set +e
"$bin/kvbench" --workload=e >/dev/null 2>"$RKV_CLUSTER_DIR/err"
status=$?
set -e
[ "$status" = 2 ] && grep -q scan "$RKV_CLUSTER_DIR/err" || fail "workload e was not refused"

command -v memcached >/dev/null || fail "memcached is not installed (scripts/install-deps.sh)"
command -v redis-server >/dev/null || fail "redis-server is not installed (scripts/install-deps.sh)"
memcached -l 127.0.0.1 -p "$mc_port" -U 0 -m 256 -u "$(id -un)" &
pids+=($!)
redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
  --daemonize no >/dev/null &
pids+=($!)
proc_wait_port "${pids[0]}" "127.0.0.1:$mc_port" || fail "memcached did not start on port $mc_port"
proc_wait_port "${pids[1]}" "127.0.0.1:$redis_port" || fail "redis-server did not start on port $redis_port"
run memcached-a --driver=memcached --memcached="127.0.0.1:$mc_port" --workload=a "${common[@]}"
run redis-a --driver=redis --redis="127.0.0.1:$redis_port" --workload=a "${common[@]}"
echo "kvbench_e2e: all runs passed"
