#!/usr/bin/env bash
# A wall clock stepped by an hour, forward and back, on one server and on
# one client while they serve and write: nothing may notice. Leases,
# deadlines, grace periods and parking limits run on the monotonic clock,
# so no client session is fenced for it, no server fences itself, no read
# is trusted late nor a block reused early, and every read verifies.
#
# Three servers hold three copies of every key (scripts/cluster.sh, one
# kvcoord). Server s1 is restarted under libfaketime (Debian's faketime)
# and a verifying YCSB-A kvbench runs under it too, each reading its offset
# from a file of its own; only CLOCK_REALTIME moves (as when NTP or an
# operator sets the clock), CLOCK_MONOTONIC does not. Mid-run, counted in
# kvbench's progress lines, the server's clock goes +1 h and the client's
# -1 h, then the other way round, then the client's back. Everything
# started here is stopped here. A second client, on the real clock, is
# paused past its lease before s1's clock goes back: s1 must fence it a
# lease later, as the others do, not an hour later.
#
#   tests/cluster/clock_step.sh BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh
bin="$(cd "${1:?usage: clock_step.sh BIN_DIR}" && pwd)"
records=5000

libfaketime=$(ls /usr/lib/*/faketime/libfaketimeMT.so.1 2>/dev/null | head -n 1 || true)
[ -n "$libfaketime" ] ||
  { echo "clock_step: no libfaketimeMT.so.1 (scripts/install-deps.sh installs faketime)" >&2; exit 1; }

export RKV_BIN="$bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-clock-step.XXXXXX)"
export RKV_PORT_BASE=$(proc_pick_ports 19000 20000)
# A lease of 3 s: the test is about clocks, not about heartbeats starved on a
# busy machine.
export RKV_ETCD_MEMBERS=0 RKV_REPLICAS=3 RKV_SERVER_MEMORY=64MiB RKV_LEASE_MS=3000
bench_pid="" paused_pid=""
cleanup() {
  for pid in $bench_pid $paused_pid; do kill -9 "$pid" 2>/dev/null || true; done
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT
fail() {
  echo "clock_step: $*" >&2
  tail -n 5 "$RKV_CLUSTER_DIR"/*.log "$RKV_CLUSTER_DIR/bench.out" >&2 || true
  exit 1
}

# faketime_env FILE: the environment that makes a process read its wall
# clock's offset from FILE ("+0", "+1h", "-1h"), again at most a second
# after it changes.
faketime_env() {
  echo "LD_PRELOAD=$libfaketime FAKETIME_TIMESTAMP_FILE=$1 FAKETIME_CACHE_DURATION=1 FAKETIME_DONT_FAKE_MONOTONIC=1"
}
server_clock="$RKV_CLUSTER_DIR/s1.faketime"
client_clock="$RKV_CLUSTER_DIR/client.faketime"
echo "+0" >"$server_clock"
echo "+0" >"$client_clock"

# The mechanism itself, before it is trusted: a stepped process sees the
# step, and its monotonic clock does not.
echo "+1h" >"$client_clock"
skew=$(($(env $(faketime_env "$client_clock") date +%s) - $(date +%s)))
[ "$skew" -ge 3590 ] && [ "$skew" -le 3610 ] || fail "libfaketime does not step the clock (skew $skew s)"
mono=$(env $(faketime_env "$client_clock") python3 -c 'import time; print(int(time.monotonic()))')
[ $((mono - $(python3 -c 'import time; print(int(time.monotonic()))'))) -le 5 ] ||
  fail "libfaketime moved the monotonic clock too"
echo "+0" >"$client_clock"

bash scripts/cluster.sh start 3 >/dev/null
bash scripts/cluster.sh wait-serving 1 || fail "the group does not serve with 3 copies"
coord=$(bash scripts/cluster.sh coordinators)
flags=(--coordinator="$coord" --token_file="$RKV_CLUSTER_DIR/token" --records=$records
       --value_size=200 --progress=false)
"$bin/kvbench" "${flags[@]}" --phase=load >/dev/null || fail "the load failed"

# s1 again, on a clock that can be stepped; its group copies it back in.
bash scripts/cluster.sh kill s1 >/dev/null
env $(faketime_env "$server_clock") bash scripts/cluster.sh restart-server s1
bash scripts/cluster.sh wait s1 up || fail "s1 did not come back"
bash scripts/cluster.sh wait-serving 1 || fail "the group does not serve with s1 back"
# new_lines SERVER PATTERN: what SERVER logged since the run began that
# matches PATTERN.
declare -A log_mark
for s in s1 s2 s3; do log_mark[$s]=$(($(wc -l <"$RKV_CLUSTER_DIR/$s.log") + 1)); done
new_lines() { tail -n +"${log_mark[$1]}" "$RKV_CLUSTER_DIR/$1.log" | grep -E "$2" || true; }
lapsed='fenced client session [0-9a-f]+: no renewal'

out="$RKV_CLUSTER_DIR/bench.out"
json="$RKV_CLUSTER_DIR/bench.json"
env $(faketime_env "$client_clock") "$bin/kvbench" "${flags[@]}" --phase=run --workload=a \
  --verify --progress=true --threads=2 --outstanding=8 --duration=14s --json="$json" >"$out" 2>&1 &
bench_pid=$!
bench_start=$(proc_start_time "$bench_pid")
# And a client on the real clock that will be paused past its lease while
# s1's clock goes back: s1 must fence it a lease later, as the others do,
# not an hour later.
"$bin/kvbench" "${flags[@]}" --phase=run --workload=a --threads=1 --outstanding=1 --key_prefix=paused \
  --duration=120s --progress=true >"$RKV_CLUSTER_DIR/paused.out" 2>&1 &
paused_pid=$!

# at_second N: until kvbench has printed its Nth progress line (20 s at most).
at_second() {
  local deadline=$((SECONDS + 20))
  until [ "$(grep -cE '^run +[0-9.]+ s' "$out" || true)" -ge "$1" ]; do
    proc_alive "$bench_pid" "$bench_start" || fail "kvbench exited before second $1"
    [ "$SECONDS" -lt "$deadline" ] || fail "kvbench printed no progress line $1 in 20 s"
    sleep 0.05
  done
}
at_second 3
echo "+1h" >"$server_clock"
echo "-1h" >"$client_clock"
at_second 5
grep -qE '^run +[0-9.]+ s +[1-9]' "$RKV_CLUSTER_DIR/paused.out" || fail "the client to pause did not run"
kill -STOP "$paused_pid"
at_second 7
echo "-1h" >"$server_clock"
echo "+1h" >"$client_clock"
at_second 11
echo "+0" >"$client_clock"

wait "$bench_pid" || fail "kvbench failed"
bench_pid=""
read -r ops errors mismatches <<<"$(python3 - "$json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))["run"]
print(run["operations"], run["errors"], run["verify"]["mismatches"])
EOF
)"
echo "clock_step: $ops operations, $errors errors, $mismatches reads that did not verify"
[ "$ops" -gt 0 ] || fail "no operation ran"
[ "$errors" -eq 0 ] || fail "$errors operations failed while clocks stepped"
[ "$mismatches" -eq 0 ] || fail "$mismatches reads did not verify"

# The paused client's session, fenced by s2 and s3 on time, and by s1 too
# (20 s at most); no other session fenced for a lapsed lease anywhere.
deadline=$((SECONDS + 20))
until [ -n "$(new_lines s1 "$lapsed")" ]; do
  [ "$SECONDS" -lt "$deadline" ] ||
    fail "s1 kept a paused client's session: its stepped-back clock timed the lease"
  sleep 0.1
done
kill -9 "$paused_pid"
paused_pid=""
for s in s1 s2 s3; do
  fenced=$(new_lines "$s" "$lapsed")
  [ -n "$fenced" ] || fail "$s did not fence the paused client"
  [ "$(wc -l <<<"$fenced")" -eq 1 ] || fail "$s fenced other sessions for a lapsed lease: $fenced"
  [ "$(new_lines s1 "$lapsed" | awk '{print $6}')" = "$(awk '{print $6}' <<<"$fenced")" ] ||
    fail "s1 and $s fenced different sessions"
done
[ -z "$(new_lines s1 'fenced the region')$(new_lines s2 'fenced the region')$(new_lines s3 'fenced the region')" ] ||
  fail "a server fenced its region while clocks stepped"
bash scripts/cluster.sh wait-serving 1 || fail "the group no longer serves with 3 copies"

# s1 really ran stepped: its clock an hour back since second 7, its last
# words are stamped so.
bash scripts/cluster.sh term s1 >/dev/null
stamp=$(tail -n 1 "$RKV_CLUSTER_DIR/s1.log" | awk '{print $2, $3}')
skew=$(($(date +%s) - $(date -u -d "${stamp%Z}" +%s 2>/dev/null || echo 0)))
[ "$skew" -ge 3500 ] && [ "$skew" -le 3700 ] ||
  fail "s1's last log line ($stamp) is not an hour back: was its clock stepped?"
echo "clock_step: ok"
