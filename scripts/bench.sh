#!/usr/bin/env bash
# rkv, memcached and Redis side by side: the same YCSB workloads, the same
# records, threads and operations in flight, one after another on this
# machine. Installs what is missing (memcached, redis-server, gnuplot-nox),
# builds, starts every server on loopback, and stops them all at the end.
#
#   scripts/bench.sh [--workloads="a b c"] [--duration=10s] [--records=100000]
#                    [--threads=2] [--outstanding=16] [--out=DIR]
#
# Writes into DIR (default bench/results/DATE-TIME): one kvbench JSON per
# run, results.md (a Markdown table) and throughput.png (a chart).
set -euo pipefail
cd "$(dirname "$0")/.."

workloads="a b c"
duration=10s
records=100000
threads=2
outstanding=16
out="bench/results/$(date +%Y%m%d-%H%M%S)"
for arg in "$@"; do
  case "$arg" in
    --workloads=*) workloads="${arg#*=}" ;;
    --duration=*) duration="${arg#*=}" ;;
    --records=*) records="${arg#*=}" ;;
    --threads=*) threads="${arg#*=}" ;;
    --outstanding=*) outstanding="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

bash scripts/install-deps.sh gnuplot-nox
bash scripts/build.sh
mkdir -p "$out"
out="$(cd "$out" && pwd)"

export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-bench.XXXXXX)"
export RKV_COORDINATOR=127.0.0.1:7410
# Room for the records (about 1.1 KB each in the heap) on three servers.
export RKV_SERVER_MEMORY="${RKV_SERVER_MEMORY:-$((records * 500 / 1048576 + 64))MiB}"
mc_port=11411
redis_port=6479
pids=()
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT INT TERM

bash scripts/cluster.sh start 3
memcached -l 127.0.0.1 -p "$mc_port" -U 0 -m 4096 -u "$(id -un)" &
pids+=($!)
redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no --daemonize no \
  >"$out/redis.log" &
pids+=($!)
source scripts/lib/proc.sh
proc_wait_port "${pids[0]}" "127.0.0.1:$mc_port" && proc_wait_port "${pids[1]}" "127.0.0.1:$redis_port" ||
  { echo "bench.sh: memcached or redis-server did not start (ports $mc_port, $redis_port in use?)" >&2; exit 1; }

stores="rkv memcached redis"
address() {
  case "$1" in
    rkv) echo "--coordinator=$RKV_COORDINATOR" ;;
    memcached) echo "--memcached=127.0.0.1:$mc_port" ;;
    redis) echo "--redis=127.0.0.1:$redis_port" ;;
  esac
}
common=(--records="$records" --threads="$threads" --outstanding="$outstanding" --progress=false)
for store in $stores; do
  echo "== loading $records records into $store"
  build/bin/kvbench --driver="$store" $(address "$store") --phase=load "${common[@]}" \
    --json="$out/load-$store.json" | tail -n 4
done
for w in $workloads; do
  for store in $stores; do
    echo "== workload $w on $store for $duration"
    build/bin/kvbench --driver="$store" $(address "$store") --phase=run --workload="$w" \
      --duration="$duration" "${common[@]}" --json="$out/$w-$store.json" | tail -n 6
  done
done

# field FILE OP KEY: a figure of the run phase from kvbench's JSON (whose
# top level holds the last phase's figures first).
field() {
  if [ "$2" = "" ]; then
    grep -o "\"$3\": [0-9.]*" "$1" | head -1 | awk '{print $2}'
  else
    grep -o "\"$2\": {[^}]*}" "$1" | head -1 | grep -o "\"$3\": [0-9.]*" | awk '{print $2}'
  fi
}

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
{
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($cpu), Linux $(uname -r), by"
  echo "\`scripts/bench.sh --workloads=\"$workloads\" --duration=$duration --records=$records --threads=$threads --outstanding=$outstanding\`."
  echo "Every store on 127.0.0.1; rkv on its soft fabric (TCP), 3 servers. Latencies in microseconds."
  echo
  echo "| workload | store | ops/s | vs rkv | read p50 | read p99 | read p99.9 | write p50 | write p99 |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  for w in $workloads; do
    base="$(field "$out/$w-rkv.json" "" throughput_ops)"
    for store in $stores; do
      f="$out/$w-$store.json"
      ops="$(field "$f" "" throughput_ops)"
      wop=update
      [ "$w" = f ] && wop=rmw
      [ "$w" = d ] && wop=insert
      printf '| %s | %s | %.0f | %.2f | %s | %s | %s | %s | %s |\n' "${w^^}" "$store" "$ops" \
        "$(awk -v a="$ops" -v b="$base" 'BEGIN { print a / b }')" \
        "$(field "$f" read p50)" "$(field "$f" read p99)" "$(field "$f" read p999)" \
        "$(field "$f" "$wop" p50 || true)" "$(field "$f" "$wop" p99 || true)"
      echo "${w^^} $store $ops" >>"$out/throughput.dat"
    done
  done
} >"$out/results.md"

# One cluster of bars per workload, one bar per store.
awk '{ ops[$1, $2] = $3; if (!seen[$1]++) w[++n] = $1 }
     END { for (i = 1; i <= n; i++) print w[i], ops[w[i], "rkv"], ops[w[i], "memcached"], ops[w[i], "redis"] }' \
  "$out/throughput.dat" >"$out/throughput.table"
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
plot "$out/throughput.table" using 2:xtic(1) title "rkv (soft fabric)", '' using 3 title "memcached", '' using 4 title "Redis"
GNUPLOT

echo
cat "$out/results.md"
echo
echo "bench.sh: results in $out (results.md, throughput.png, one JSON per run)"
