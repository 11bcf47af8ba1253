#!/usr/bin/env bash
# Instructions the client executes per cached GET and per cached UPDATE,
# counted by callgrind on the deterministic simulated fabric (so a count
# is the same on every run of one build).
#
#   scripts/client_instructions.sh [BIN_DIR] [OPS]   (default build/bin, 2000)
#
# Only the client is counted: collection is toggled on inside ClientImpl's
# Poll and asynchronous calls, and off again inside the simulated network
# (which stands in for the NIC and the server, and keeps its clock); and
# only the measured operations: callgrind dumps its counts as each call of
# RunMeasured in bench/client_hotpath.cc returns, and the last call is the
# measured one (the set-up and warm-up land in earlier dump files).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/bin}"
ops="${2:-2000}"
command -v valgrind >/dev/null || { echo "client_instructions.sh: needs valgrind" >&2; exit 2; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

for op in get update; do
  valgrind --tool=callgrind --callgrind-out-file="$out/$op" \
    --collect-atstart=no \
    --toggle-collect='rkv::(anonymous namespace)::ClientImpl::Poll(*' \
    --toggle-collect='rkv::(anonymous namespace)::ClientImpl::GetAsync(*' \
    --toggle-collect='rkv::(anonymous namespace)::ClientImpl::PutAsync(*' \
    --toggle-collect='rkv::fabric::Sim*' \
    --dump-after='rkv::(anonymous namespace)::RunMeasured(*' \
    "$bin/client_hotpath" --op="$op" --ops="$ops" >"$out/$op.log" 2>&1 ||
    { cat "$out/$op.log" >&2; exit 1; }
  measured="$(ls "$out/$op".* | grep -v '\.log$' | sort -t. -k2 -n | tail -1)"
  total="$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$measured")"
  grep -v '^==' "$out/$op.log" | tail -1
  awk -v t="$total" -v n="$ops" -v op="$op" \
    'BEGIN { printf "%-7s %10.0f client instructions per operation\n", op, t / n }'
done
