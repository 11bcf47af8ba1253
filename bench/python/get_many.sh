#!/usr/bin/env bash
# Runs bench/python/get_many.py: starts a one-server rkv cluster on the soft
# fabric and a redis-server, both on loopback, with the Python package from
# BUILD_DIR (built by scripts/build.sh), prints the table, and stops
# everything it started. Extra arguments go to get_many.py (--help).
#
#   bench/python/get_many.sh BUILD_DIR [--rounds=5 --seconds=1 --batches=1,16,64,256 ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh
build="$(cd "${1:?usage: get_many.sh BUILD_DIR [get_many.py options]}" && pwd)"
shift
[ -f "$build/python/rkv/__init__.py" ] ||
  { echo "get_many.sh: no Python package in $build/python (scripts/build.sh builds it)" >&2; exit 1; }
export RKV_BIN="$build/bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-pybench.XXXXXX)"
export RKV_PORT_BASE=$(proc_pick_ports 16000 17000)
export RKV_ETCD_MEMBERS=0 RKV_REPLICAS=1
redis_port=$((RKV_PORT_BASE + 9))
redis_pid=""
cleanup() {
  [ -z "$redis_pid" ] || { kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null || true; }
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT

bash scripts/cluster.sh start 1 >/dev/null
bash scripts/cluster.sh wait-serving >/dev/null
redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no --daemonize no \
  --protected-mode yes >"$RKV_CLUSTER_DIR/redis.log" 2>&1 &
redis_pid=$!
proc_wait_port "$redis_pid" "127.0.0.1:$redis_port" ||
  { tail -n 3 "$RKV_CLUSTER_DIR/redis.log" >&2; echo "get_many.sh: redis-server did not start" >&2; exit 1; }

# Debian's interpreter: python3-redis is installed for it.
PYTHONPATH="$build/python" /usr/bin/python3 bench/python/get_many.py \
  --coordinator="$(bash scripts/cluster.sh coordinators)" --token_file="$RKV_CLUSTER_DIR/token" \
  --redis="127.0.0.1:$redis_port" "$@"
