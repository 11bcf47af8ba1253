#!/usr/bin/env bash
# `cmake --install` end to end: installs BUILD_DIR into a fresh prefix,
# builds the outside consumer (tests/install/consumer) against it twice —
# with find_package(rkv) and with pkg-config — starts a cluster from the
# installed binaries and runs both consumers against it.
#
#   tests/install/run.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
build="$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)"
work="$(mktemp -d /tmp/rkv-install.XXXXXX)"
export RKV_CLUSTER_DIR="$work/cluster"
source scripts/lib/proc.sh
port=$(proc_pick_ports 24000 26000)
export RKV_COORDINATOR="127.0.0.1:$port"
export RKV_SERVER_MEMORY=16MiB
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/kvserver bin/kvcoord bin/kvctl bin/kvbench include/rkv/client.h; do
  [ -e "$prefix/$f" ] || { echo "install: $f missing" >&2; exit 1; }
done

cmake -S tests/install/consumer -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" -j "$(nproc)" >/dev/null
pc="$(find "$prefix" -name rkv.pc)"
# shellcheck disable=SC2046
g++ -O1 tests/install/consumer/main.cc -o "$work/pc_consumer" \
  $(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs rkv)

RKV_BIN="$prefix/bin" bash scripts/cluster.sh start 2 >/dev/null
"$work/consumer/consumer" "$RKV_COORDINATOR" "$RKV_CLUSTER_DIR/token" installed find_package
"$work/pc_consumer" "$RKV_COORDINATOR" "$RKV_CLUSTER_DIR/token" pkgconfig works
[ "$("$prefix/bin/kvctl" get installed --coordinator="$RKV_COORDINATOR" \
      --token_file="$RKV_CLUSTER_DIR/token")" = find_package ]
echo "install: both consumers work against the installed tree"
