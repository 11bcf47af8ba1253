#!/usr/bin/env bash
# rkv, memcached and Redis side by side on this machine, like with like:
# one kvserver against one memcached process and one Redis process, the
# same YCSB workloads, records, client threads and operations in flight;
# rkv with three servers as an extra row; and a scaling run. See usage().
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
Usage: scripts/bench.sh [OPTION]...

Runs kvbench (bench/kvbench) against rkv, memcached and Redis on 127.0.0.1,
one after another with the same settings, and writes a Markdown table and
charts. Installs what is missing (apt-get: memcached, redis-server,
gnuplot-nox, python3 and the build's packages), builds, starts every server,
and stops everything it started at the end, on failure and on Ctrl-C.

What it compares, by default:
  - rkv with ONE kvserver (soft fabric over TCP loopback) against one
    memcached process and one Redis process; rkv's "vs" column is 1.00;
  - rkv with THREE kvservers, as an extra row labelled "rkv, 3 servers";
  - a scaling run: one workload at several points of client threads x
    operations in flight per thread, throughput and read p99 per store.
memcached runs with as many worker threads (-t) as the most client threads
of any run, as kvserver's soft fabric runs min(cores, 4) event loops (2
here on 2 cores); Redis runs as it is built to, one thread.

Options (--opt=VALUE or --opt VALUE):
  --workloads="a b c"   YCSB workloads to compare: a b c d f (E has scans)
  --duration=10s        length of each compared run (kvbench --duration:
                        a number and ms, s or m)
  --records=100000      records loaded into each store (at least 2)
  --threads=2           client threads, each with its own connection
  --outstanding=16      operations in flight per client thread
  --repeat=1            run every setting N times, interleaved; the tables
                        show the medians (and the range of ops/s)
  --no-three-servers    leave out the rkv 3-server row
  --replicas            add rkv rows with 2 and 3 copies of every key
                        (kvcoord --replicas: 2 and 3 servers, one replica
                        group each), for their cost against one copy
  --scaling             the scaling run (the default)
  --no-scaling          skip the scaling run
  --scaling-points="1x1 1x4 1x16 2x16 2x64"
                        its points, THREADSxOUTSTANDING each
  --scaling-duration=3s length of each scaling run
  --scaling-workload=c  the workload it runs (a b c d f)
  --out=DIR             where results go (default bench/results/DATE-TIME)
  --no-build            use the binaries in build/bin (BUILD_DIR/bin) as
                        they are, without installing or building
  -h, --help            this text

Writes into DIR: results.md (the tables), throughput.png (ops/s per
workload and store), scaling.png (ops/s and p99 against operations in
flight, one line per store), one kvbench JSON per run, logs/ (kvbench's
output, the servers' logs). Environment: RKV_SERVER_MEMORY overrides the
region size of each kvserver.
EOF
}

die() { echo "bench.sh: $*" >&2; exit 2; }

workloads="a b c"
duration=10s
records=100000
threads=2
outstanding=16
repeat=1
three=1
replicas=0
scaling=1
scaling_points="1x1 1x4 1x16 2x16 2x64"
scaling_duration=3s
scaling_workload=c
out=""
build=1
while [ $# -gt 0 ]; do
  arg="$1"
  shift
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --no-three-servers) three=0; continue ;;
    --replicas) replicas=1; continue ;;
    --scaling) scaling=1; continue ;;
    --no-scaling) scaling=0; continue ;;
    --no-build) build=0; continue ;;
    --*=*) name="${arg%%=*}" value="${arg#*=}" ;;
    --workloads|--duration|--records|--threads|--outstanding|--repeat|--scaling-points|\
    --scaling-duration|--scaling-workload|--out)
      [ $# -gt 0 ] || die "$arg needs a value (try --help)"
      name="$arg" value="$1"
      shift
      ;;
    *) die "unknown argument '$arg' (try --help)" ;;
  esac
  case "$name" in
    --workloads) workloads="$value" ;;
    --duration) duration="$value" ;;
    --records) records="$value" ;;
    --threads) threads="$value" ;;
    --outstanding) outstanding="$value" ;;
    --repeat) repeat="$value" ;;
    --scaling-points) scaling_points="$value" ;;
    --scaling-duration) scaling_duration="$value" ;;
    --scaling-workload) scaling_workload="$value" ;;
    --out) out="$value" ;;
    *) die "unknown option '$name' (try --help)" ;;
  esac
done

# Checks, before anything is installed or started.
check_int() {  # NAME VALUE MIN MAX
  [[ "$2" =~ ^[0-9]+$ ]] && [ "${#2}" -le 9 ] && [ "$2" -ge "$3" ] && [ "$2" -le "$4" ] ||
    die "$1 must be a whole number from $3 to $4, not '$2'"
}
check_duration() {  # NAME VALUE
  [[ "$2" =~ ^[0-9]+(\.[0-9]+)?(ms|s|m)$ ]] && [[ ! "$2" =~ ^0+(\.0+)?[a-z]+$ ]] ||
    die "$1 must be a positive duration such as 10s, 500ms or 1m, not '$2'"
}
check_workload() {  # NAME VALUE
  case "$2" in
    a|b|c|d|f) ;;
    e|E) die "$1: workload E (range scans) is not supported: a hash store has no scans" ;;
    *) die "$1: unknown workload '$2' (one of a b c d f)" ;;
  esac
}
workloads="${workloads,,}"
workloads="${workloads//,/ }"
[ -n "${workloads// /}" ] || die "--workloads is empty"
for w in $workloads; do check_workload --workloads "$w"; done
check_duration --duration "$duration"
check_int --records "$records" 2 100000000
check_int --threads "$threads" 1 1024
check_int --outstanding "$outstanding" 1 4096
check_int --repeat "$repeat" 1 100
max_threads="$threads"
if [ "$scaling" = 1 ]; then
  check_duration --scaling-duration "$scaling_duration"
  scaling_workload="${scaling_workload,,}"
  check_workload --scaling-workload "$scaling_workload"
  [ -n "${scaling_points// /}" ] || die "--scaling-points is empty"
  for p in $scaling_points; do
    [[ "$p" =~ ^([0-9]+)x([0-9]+)$ ]] || die "--scaling-points: '$p' is not THREADSxOUTSTANDING, e.g. 2x16"
    t="${BASH_REMATCH[1]}" k="${BASH_REMATCH[2]}"
    check_int "--scaling-points threads" "$t" 1 1024
    check_int "--scaling-points outstanding" "$k" 1 4096
    [ "$t" -le "$max_threads" ] || max_threads="$t"
  done
fi
[ -n "$out" ] || out="bench/results/$(date +%Y%m%d-%H%M%S)"

bin="${BUILD_DIR:-build}/bin"
if [ "$build" = 1 ]; then
  bash scripts/install-deps.sh gnuplot-nox python3
  bash scripts/build.sh
else
  for p in kvbench kvserver kvcoord kvctl; do
    [ -x "$bin/$p" ] || die "--no-build: no $bin/$p (run scripts/build.sh)"
  done
  for c in memcached redis-server gnuplot python3 ss; do
    command -v "$c" >/dev/null || die "--no-build: $c is not installed (run without --no-build)"
  done
fi
bin="$(cd "$bin" && pwd)"
export RKV_BIN="$bin"
mkdir -p "$out/logs"
out="$(cd "$out" && pwd)"
: >"$out/runs.tsv"
source scripts/lib/proc.sh

# Everything started here is stopped by cleanup, whatever the way out.
work="$(mktemp -d /tmp/rkv-bench.XXXXXX)"
clusters=()
pids=()
cleanup() {
  local status=$? c p start
  trap '' INT TERM  # A second Ctrl-C does not cut the stopping short.
  trap - EXIT
  for c in "${clusters[@]}"; do
    RKV_CLUSTER_DIR="$c" bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  done
  for p in "${pids[@]}"; do
    start="$(proc_start_time "$p")"
    [ -n "$start" ] || continue
    kill "$p" 2>/dev/null || true
    proc_wait_gone "$p" "$start" 10 || kill -9 "$p" 2>/dev/null || true
  done
  # Server logs are kept with the results; regions and tokens are not.
  for c in "${clusters[@]}"; do
    for f in "$c"/*.log; do [ -f "$f" ] && cp "$f" "$out/logs/$(basename "$c")-$(basename "$f")"; done
  done
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'echo "bench.sh: interrupted" >&2; exit 130' INT
trap 'echo "bench.sh: terminated" >&2; exit 143' TERM

# Ports of our own, off the defaults of cluster.sh (7400), memcached
# (11211) and Redis (6379), and off the ranges the tests pick from.
base=$(proc_pick_ports 30000 32000)
coord1="127.0.0.1:$base"
coord3="127.0.0.1:$((base + 1))"
mc_port=$((base + 2))
redis_port=$((base + 3))
coord_r2="127.0.0.1:$((base + 4))"
coord_r3="127.0.0.1:$((base + 5))"

# start_cluster NAME N COORDINATOR MEMORY [COPIES]: scripts/cluster.sh's
# cluster of N servers on the soft fabric, listening on 127.0.0.1 only,
# keeping COPIES (default 1) of every key; it returns when the
# coordinator's map has every server up and every replica group serving.
start_cluster() {
  local dir="$work/$1" copies="${5:-1}"
  mkdir -p "$dir"
  clusters+=("$dir")
  echo "== starting rkv: kvcoord on $3 and $2 kvserver(s) of ${RKV_SERVER_MEMORY:-$4} each, $copies $([ "$copies" = 1 ] && echo copy || echo copies) of every key"
  RKV_CLUSTER_DIR="$dir" RKV_COORDINATOR="$3" RKV_FABRIC=soft RKV_SERVER_LISTEN=127.0.0.1:0 \
    RKV_SERVER_MEMORY="${RKV_SERVER_MEMORY:-$4}" RKV_REPLICAS="$copies" \
    bash scripts/cluster.sh start "$2"
}
# Room for the records (about 1.1 KB each in the heap, three quarters of a
# region) and inserts, with slack for the chunks clients hold.
start_cluster rkv1 1 "$coord1" "$((records * 1500 / 1048576 + 96))MiB"
[ "$three" = 0 ] || start_cluster rkv3 3 "$coord3" "$((records * 600 / 1048576 + 64))MiB"
if [ "$replicas" = 1 ]; then
  start_cluster rkvr2 2 "$coord_r2" "$((records * 1500 / 1048576 + 96))MiB" 2
  start_cluster rkvr3 3 "$coord_r3" "$((records * 1500 / 1048576 + 96))MiB" 3
fi

echo "== starting memcached on 127.0.0.1:$mc_port ($max_threads worker threads) and redis-server on 127.0.0.1:$redis_port"
memcached -l 127.0.0.1 -p "$mc_port" -U 0 -t "$max_threads" -m 4096 -u "$(id -un)" \
  >"$out/logs/memcached.log" 2>&1 &
pids+=($!)
proc_wait_port "${pids[-1]}" "127.0.0.1:$mc_port" ||
  { tail -n 3 "$out/logs/memcached.log" >&2; echo "bench.sh: memcached did not start" >&2; exit 1; }
redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no --daemonize no \
  --protected-mode yes >"$out/logs/redis.log" 2>&1 &
pids+=($!)
proc_wait_port "${pids[-1]}" "127.0.0.1:$redis_port" ||
  { tail -n 3 "$out/logs/redis.log" >&2; echo "bench.sh: redis-server did not start" >&2; exit 1; }

stores="rkv1 memcached redis"
[ "$three" = 0 ] || stores="$stores rkv3"
[ "$replicas" = 0 ] || stores="$stores rkvr2 rkvr3"
address() {
  case "$1" in
    rkvr2) echo "--driver=rkv --fabric=soft --coordinator=$coord_r2 --token_file=$work/rkvr2/token" ;;
    rkvr3) echo "--driver=rkv --fabric=soft --coordinator=$coord_r3 --token_file=$work/rkvr3/token" ;;
    rkv1) echo "--driver=rkv --fabric=soft --coordinator=$coord1 --token_file=$work/rkv1/token" ;;
    rkv3) echo "--driver=rkv --fabric=soft --coordinator=$coord3 --token_file=$work/rkv3/token" ;;
    memcached) echo "--driver=memcached --memcached=127.0.0.1:$mc_port" ;;
    redis) echo "--driver=redis --redis=127.0.0.1:$redis_port" ;;
  esac
}

# kvb NAME STORE ARGS...: one kvbench run, its output in logs/NAME.log and
# its JSON in NAME.json. Operations that fail are reported, and counted in
# the tables; a run that cannot start stops the script.
kvb() {
  local name="$1" store="$2" status=0
  shift 2
  # shellcheck disable=SC2046
  "$bin/kvbench" $(address "$store") --records="$records" --progress=false \
    --json="$out/$name.json" "$@" >"$out/logs/$name.log" 2>&1 || status=$?
  if [ "$status" != 0 ]; then
    if [ "$status" = 1 ] && [ -s "$out/$name.json" ]; then
      echo "bench.sh: warning: $name: some operations failed ($(grep -m1 'first error' "$out/logs/$name.log" || true))" >&2
    else
      tail -n 5 "$out/logs/$name.log" >&2
      echo "bench.sh: kvbench $name failed (exit status $status); its output is in $out/logs/$name.log" >&2
      exit 1
    fi
  fi
}
# summary NAME: kvbench's one-line result of a run.
summary() { grep -m1 '^\[run\]\|^\[load\]' "$out/logs/$1.log" | sed 's/^\[[a-z]*\] //'; }

for store in $stores; do
  echo "== loading $records records into $store"
  kvb "load-$store" "$store" --phase=load --threads="$threads" --outstanding="$outstanding"
  echo "   $(summary "load-$store")"
  load_errors=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["load"]["errors"])' \
    "$out/load-$store.json")
  [ "$load_errors" = 0 ] || {
    echo "bench.sh: loading $store failed; see $out/logs/load-$store.log and the servers' logs" >&2
    exit 1
  }
done

# The comparison: for each repetition and workload, every store in turn.
for rep in $(seq 1 "$repeat"); do
  for w in $workloads; do
    for store in $stores; do
      name="$w-$store"
      [ "$repeat" = 1 ] || name="$name-$rep"
      echo "== workload ${w^^} on $store, $threads threads x $outstanding in flight, $duration$([ "$repeat" = 1 ] || echo " (run $rep of $repeat)")"
      kvb "$name" "$store" --phase=run --workload="$w" --duration="$duration" \
        --threads="$threads" --outstanding="$outstanding"
      echo "   $(summary "$name")"
      printf 'compare\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$store" "$threads" "$outstanding" "$rep" \
        "$out/$name.json" >>"$out/runs.tsv"
    done
  done
done

if [ "$scaling" = 1 ]; then
  for rep in $(seq 1 "$repeat"); do
    for p in $scaling_points; do
      t="${p%x*}" k="${p#*x}"
      for store in rkv1 memcached redis; do
        name="scaling-$scaling_workload-$store-$p"
        [ "$repeat" = 1 ] || name="$name-$rep"
        echo "== scaling: workload ${scaling_workload^^} on $store, $t threads x $k in flight, $scaling_duration"
        kvb "$name" "$store" --phase=run --workload="$scaling_workload" \
          --duration="$scaling_duration" --threads="$t" --outstanding="$k"
        echo "   $(summary "$name")"
        printf 'scaling\t%s\t%s\t%s\t%s\t%s\t%s\n' "$scaling_workload" "$store" "$t" "$k" "$rep" \
          "$out/$name.json" >>"$out/runs.tsv"
      done
    done
  done
fi

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
args="--workloads=\"$workloads\" --duration=$duration --records=$records --threads=$threads --outstanding=$outstanding"
[ "$repeat" = 1 ] || args="$args --repeat=$repeat"
[ "$three" = 1 ] || args="$args --no-three-servers"
[ "$replicas" = 0 ] || args="$args --replicas"
if [ "$scaling" = 1 ]; then
  args="$args --scaling-points=\"$scaling_points\" --scaling-duration=$scaling_duration --scaling-workload=$scaling_workload"
else
  args="$args --no-scaling"
fi
{
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($cpu), Linux $(uname -r), by"
  echo "\`scripts/bench.sh $args\`."
  echo "Every store on 127.0.0.1 with the same client threads and operations in flight: rkv on"
  echo "its soft fabric (TCP), one kvserver (and three in the extra row$([ "$replicas" = 0 ] || echo "; 2 and 3 servers keeping 2 and 3 copies of every key in the replica rows")); one memcached process"
  echo "(-t $max_threads); one Redis process. Latencies in microseconds$([ "$repeat" = 1 ] || echo ", medians of $repeat runs")."
} >"$work/header"
python3 scripts/lib/bench_report.py "$out" "$work/header"

label() {  # the chart's name of a store
  case "$1" in
    rkv1) echo "rkv, 1 server (soft fabric)" ;;
    rkv3) echo "rkv, 3 servers" ;;
    rkvr2) echo "rkv, 2 copies" ;;
    rkvr3) echo "rkv, 3 copies" ;;
    memcached) echo "memcached" ;;
    redis) echo "Redis" ;;
  esac
}
plot="'$out/throughput.table' using 2:xtic(1) title '$(label rkv1)'" col=3
for store in ${stores#rkv1 }; do
  plot="$plot, '' using $col title '$(label "$store")'"
  col=$((col + 1))
done
gnuplot <<GNUPLOT
set terminal pngcairo size 900,500
set output "$out/throughput.png"
set title "YCSB throughput, $threads threads x $outstanding in flight, $records records (scripts/bench.sh)"
set ylabel "operations per second"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key top left
set yrange [0:*]
set grid ytics
plot $plot
GNUPLOT

if [ "$scaling" = 1 ]; then
  ops="" p99="" col=4
  for store in rkv1 memcached redis; do
    ops="$ops${ops:+, }'$out/scaling.dat' using 1:$col:xtic(2) with linespoints lw 2 title '$(label "$store")'"
    p99="$p99${p99:+, }'$out/scaling.dat' using 1:$((col + 3)):xtic(2) with linespoints lw 2 title '$(label "$store")'"
    col=$((col + 1))
  done
  gnuplot <<GNUPLOT
set terminal pngcairo size 1200,500
set output "$out/scaling.png"
set multiplot layout 1,2 title "YCSB workload ${scaling_workload^^}, $records records: threads x operations in flight per thread (scripts/bench.sh)"
set xlabel "threads x in flight"
set grid
set key below horizontal
set ylabel "operations per second"
set yrange [0:*]
set title "throughput"
plot $ops
set ylabel "read p99, microseconds"
set logscale y
set yrange [*:*]
set title "read p99 latency"
plot $p99
unset multiplot
GNUPLOT
fi

echo
cat "$out/results.md"
echo
echo "bench.sh: results in $out (results.md, throughput.png$([ "$scaling" = 0 ] || echo ", scaling.png"), one JSON per run, logs/)"
