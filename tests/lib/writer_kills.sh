# Sourced by the client-crash tests: a cluster of one replica group
# (scripts/cluster.sh), its primary's figures from kvctl status, and
# writers killed mid-run. Expects RKV_CLUSTER_DIR and bin set, and fail()
# defined.

# start_group COPIES RECORDS: starts a cluster of one group of COPIES
# servers and sets coord and flags (kvbench's, for RECORDS records of
# 1000 B).
start_group() {
  RKV_REPLICAS="$1" bash scripts/cluster.sh start "$1" >/dev/null
  coord=$(bash scripts/cluster.sh coordinators)
  flags=(--coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token" --records="$2"
         --value_size=1000)
}

# server_stat KEY: the group's primary's figure from kvctl status --json
# (clients take heap from the primary alone); empty while it has none.
server_stat() {
  "$bin/kvctl" --coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token" status --json |
    python3 -c '
import json, sys
try:
    m = json.load(sys.stdin)
    primary = m["groups"][0]["members"][0]
    print(next(s[sys.argv[1]] for s in m["servers"] if s["id"] == primary))
except (ValueError, KeyError, IndexError, StopIteration):
    pass' "$1"
}

# wait_stat KEY OP VALUE: until the figure compares so (usage is counted
# every 5 s), 60 s at most.
wait_stat() {
  local deadline=$((SECONDS + 60)) v
  while :; do
    v=$(server_stat "$1")
    [ -n "$v" ] && [ "$v" "$2" "$3" ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || fail "$1 is $v, not $2 $3, after 60 s"
    sleep 0.2
  done
}

# kill_writers N: N times, a YCSB-A kvbench (2 threads x 16 in flight)
# killed with SIGKILL once it has written for a second (its first
# progress line). Adds the errors the writers' last progress lines
# counted to writer_errors.
writer_errors=0
kill_writers() {
  local i out pid start deadline errors
  for i in $(seq 1 "$1"); do
    out="$RKV_CLUSTER_DIR/writer.out"
    "$bin/kvbench" "${flags[@]}" --phase=run --workload=a --threads=2 --outstanding=16 \
      --duration=120s >"$out" 2>&1 &
    pid=$!
    start=$(proc_start_time "$pid")
    deadline=$((SECONDS + 60))
    until grep -qE '^run +[0-9.]+ s +[1-9][0-9]* ops' "$out"; do
      proc_alive "$pid" "$start" || fail "writer $i exited early: $(tail -3 "$out")"
      [ "$SECONDS" -lt "$deadline" ] || fail "writer $i wrote nothing in 60 s"
      sleep 0.05
    done
    kill -9 "$pid"
    proc_wait_gone "$pid" "$start" 10 || fail "writer $i outlived SIGKILL"
    wait "$pid" 2>/dev/null || true
    errors=$(grep -oE 'errors [0-9]+' "$out" | tail -1 | cut -d' ' -f2)
    writer_errors=$((writer_errors + ${errors:-0}))
  done
}

# ycsb_a_clean WHEN: a 2 s YCSB-A run that verifies what it reads: no
# error, no wrong value.
ycsb_a_clean() {
  local json="$RKV_CLUSTER_DIR/after.json"
  "$bin/kvbench" "${flags[@]}" --phase=run --workload=a --threads=2 --outstanding=16 \
    --duration=2s --verify --progress=false --json="$json" >/dev/null ||
    fail "YCSB-A $1: kvbench exited with $?"
  [ "$(kvbench_field "$json" run errors)" = 0 ] || fail "YCSB-A $1 had errors: $(cat "$json")"
  [ "$(kvbench_field "$json" run mismatches)" = 0 ] || fail "YCSB-A $1 read wrong values"
  echo "YCSB-A $1: $(kvbench_field "$json" run operations) operations, 0 errors"
}
