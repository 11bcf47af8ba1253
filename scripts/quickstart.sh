#!/usr/bin/env bash
# Installs what is missing, builds, and shows rkv's fabric at work: one
# process registers a memory region and serves it over the soft fabric on
# loopback; another READs, WRITEs and CASes it one-sidedly and prints round
# trips and throughput. Everything it starts, it stops.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh

work="$(mktemp -d /tmp/rkv-quickstart.XXXXXX)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

descriptor="$work/region"
echo
echo "== starting a target process: 64 MiB registered on the soft fabric (127.0.0.1)"
build/bin/fabric_demo serve --fabric=soft --descriptor="$descriptor" \
  --max_serve_seconds=120 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do
  [ -f "$descriptor" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done
[ -f "$descriptor" ] || { echo "quickstart: the target did not start" >&2; cat "$work/server.log" >&2; exit 1; }
sed 's/^/   /' "$work/server.log"

echo "== a second process works on that memory with one-sided READ, WRITE and CAS"
build/bin/fabric_demo client --fabric=soft --descriptor="$descriptor" --seconds=1
echo
echo "== done; stopping the target"
