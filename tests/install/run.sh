#!/usr/bin/env bash
# `cmake --install` end to end: installs BUILD_DIR into a fresh prefix,
# copies the outside consumer (tests/install/consumer) where no source tree
# is in reach, builds it against the prefix twice — with find_package(rkv)
# and with pkg-config — checks that it needs librkv and Abseil alone (gRPC,
# protobuf and rdma-core stay librkv's own) and that librkv exports nothing
# of rkv's but the public header's declarations, then starts a cluster from
# the installed binaries and runs both consumers against it.
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
fail() { echo "install: $*" >&2; exit 1; }

prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
lib="$(find "$prefix" -name 'librkv.so' | head -1)"
for f in bin/kvserver bin/kvcoord bin/kvctl bin/kvbench include/rkv/client.h; do
  [ -e "$prefix/$f" ] || fail "$f missing"
done
[ -n "$lib" ] || fail "librkv.so missing"
# The public header is the whole of what is installed.
[ "$(find "$prefix/include" -type f | wc -l)" = 1 ] || fail "headers other than rkv/client.h installed"
# No symbol of rkv's but rkv::Client's (its methods, vtable and typeinfo):
# none of its internals, nor the generated protobuf tables of proto/rkvpb.
leaked="$(nm -DC --defined-only "$lib" | grep -i rkv |
  grep -vE ' (rkv::Client::[A-Za-z]+(\[abi:cxx11\])?\(|(vtable|typeinfo|typeinfo name) for rkv::Client$)' || true)"
[ -z "$leaked" ] || fail "librkv exports internal symbols: $(echo "$leaked" | head -5)"

src="$work/consumer-src"
cp -r tests/install/consumer "$src"
cmake -S "$src" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" -j "$(nproc)" >/dev/null
pc="$(find "$prefix" -name rkv.pc)"
# As docs/DEPLOY.md tells a user of a prefix outside the loader's path: the
# library's folder as the program's run path.
libdir="$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --variable=libdir rkv)"
# shellcheck disable=SC2046
(cd "$work" && g++ -std=c++20 -O1 "$src/main.cc" -o "$work/pc_consumer" \
  $(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs rkv) -Wl,-rpath,"$libdir")
for c in "$work/consumer/consumer" "$work/pc_consumer"; do
  needed="$(readelf -d "$c" | grep NEEDED)"
  echo "$needed" | grep -q 'librkv\.so' || fail "$(basename "$c") does not link librkv"
  if echo "$needed" | grep -Eq 'grpc|protobuf|ibverbs|rdmacm'; then
    fail "$(basename "$c") links librkv's private dependencies: $needed"
  fi
done

RKV_BIN="$prefix/bin" bash scripts/cluster.sh start 2 >/dev/null
"$work/consumer/consumer" "$RKV_COORDINATOR" "$RKV_CLUSTER_DIR/token" installed find_package
"$work/pc_consumer" "$RKV_COORDINATOR" "$RKV_CLUSTER_DIR/token" pkgconfig works
[ "$("$prefix/bin/kvctl" get installed --coordinator="$RKV_COORDINATOR" \
      --token_file="$RKV_CLUSTER_DIR/token")" = find_package ]
echo "install: both consumers work against the installed tree"
