#!/usr/bin/env bash
# Installs what is missing, builds, and shows rkv at work on this machine:
# a three-member etcd, two coordinators (one leads, the other stands by)
# and four storage servers on loopback (soft fabric, regions in files)
# keeping three copies of every key, a key put and read with kvctl and from
# Python, YCSB workload A for ten seconds with
# kvbench, then the primary of the keys' replica group killed with SIGKILL
# and its region file deleted (a lost disk): the other copies serve, the
# spare server is copied in, and every record reads back. Last, the leading
# coordinator is killed with SIGKILL under a read-only load: the standby
# takes over, and the clients go on reading.
# Everything it starts, it stops.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh

export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-quickstart.XXXXXX)"
# etcd's data on tmpfs (see scripts/cluster.sh): the cluster lives a minute.
export RKV_ETCD_TMPFS=1
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  if [ -L "$RKV_CLUSTER_DIR/etcd" ]; then rm -rf "$(readlink "$RKV_CLUSTER_DIR/etcd")"; fi
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT INT TERM
source tests/lib/kvbench_json.sh
# Every coordinator's address (after start): clients follow whichever leads.
coordinators=""
kvctl() { build/bin/kvctl --coordinator="$coordinators" "$@"; }
kvbench() { build/bin/kvbench --coordinator="$coordinators" "$@"; }

echo
export RKV_REPLICAS=3
echo "== starting a local cluster: etcd (3 members) + 2 kvcoords + 4 kvservers (soft fabric, 127.0.0.1), 3 copies of every key"
bash scripts/cluster.sh start 4
coordinators=$(bash scripts/cluster.sh coordinators)
kvctl status

echo
echo "== kvctl put greeting 'hello, one-sided world'; kvctl get greeting"
kvctl put greeting "hello, one-sided world"
kvctl get greeting

echo
echo "== from Python (the package scripts/build.sh left in build/python; docs/PYTHON.md): get, get_many"
PYTHONPATH=build/python /usr/bin/python3 - "$coordinators" "$RKV_CLUSTER_DIR/token" <<'PY'
import sys, rkv
with rkv.Client(sys.argv[1], token_file=sys.argv[2]) as db:
    db.put(b"user:1", b"alice")
    print(db.get(b"greeting"), db.get_many([b"user:1", b"user:2"]))
PY

echo
echo "== YCSB workload A (50% reads, 50% updates, zipfian) for 10 s: kvbench, 2 threads x 16 in flight"
kvbench --workload=a --records=20000 --duration=10s --threads=2 --outstanding=16 --verify

# The group's primary: the first of its members.
victim=$(kvctl status --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["groups"][0]["members"][0])')
echo
echo "== kill -9 of $victim, the primary, and its region file deleted (a lost disk)"
bash scripts/cluster.sh kill "$victim"
rm -f "$RKV_CLUSTER_DIR/$victim.region"
start=$(date +%s%N)
deadline=$((SECONDS + 30))
until kvctl get greeting >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || { echo "quickstart: the keys did not come back" >&2; exit 1; }
  sleep 0.05
done
echo "keys served again by the other copies after $(( ($(date +%s%N) - start) / 1000000 )) ms (lease 1500 ms)"
bash scripts/cluster.sh wait "$victim" down
bash scripts/cluster.sh wait-serving 1
echo "the spare server has been copied in: three copies again"
kvctl status
# Reads back every record the workload wrote, checking each value.
kvbench --workload=c --phase=run --records=20000 --operations=20000 --verify --progress=false |
  grep -E '^\[run\]|^verify'

echo
echo "== $victim restarts without its region: a blank server, now the spare"
bash scripts/cluster.sh restart-server "$victim"
bash scripts/cluster.sh wait "$victim" up
kvctl status

echo
echo "== YCSB workload C (reads only) for 8 s; 3 s in, kill -9 of the leading kvcoord"
log="$RKV_CLUSTER_DIR/kvbench-c.log"
json="$RKV_CLUSTER_DIR/kvbench-c.json"
kvbench --workload=c --phase=run --records=20000 --duration=8s --threads=2 --outstanding=16 \
  --progress=true --json="$json" >"$log" 2>&1 &
bench_pid=$!
# 3 s in: its third progress line (one a second).
deadline=$((SECONDS + 30))
until [ "$(grep -c '^run ' "$log")" -ge 3 ]; do
  kill -0 "$bench_pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ] ||
    { cat "$log" >&2; echo "quickstart: kvbench did not get going" >&2; exit 1; }
  sleep 0.05
done
lines_before=$(grep -c '^run ' "$log")
killed=$(bash scripts/cluster.sh kill kvcoord)
wait "$bench_pid" || true
grep '^run ' "$log" | sed -n "1,${lines_before}p"
echo "   <- $killed"
grep '^run ' "$log" | sed -n "$((lines_before + 1)),\$p"
[ -s "$json" ] || { cat "$log" >&2; echo "quickstart: kvbench wrote no results" >&2; exit 1; }
echo "$(kvbench_field "$json" run errors) of $(kvbench_field "$json" run operations) reads failed while the standby took over"
bash scripts/cluster.sh wait-leader
bash scripts/cluster.sh restart-coordinator
kvctl status

echo
echo "== stopping the cluster"
