#!/usr/bin/env bash
# Installs the Debian 12 packages rkv builds and tests with, and any extra
# packages named as arguments (scripts/bench.sh asks for gnuplot-nox).
# Idempotent: does nothing (and needs no network) when every package is
# already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  rdma-core libibverbs-dev librdmacm-dev ibverbs-utils
  libabsl-dev
  libprotobuf-dev protobuf-compiler
  libgrpc++-dev protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev
  # kvbench's drivers, and the servers its tests run against.
  libmemcached-dev libhiredis-dev memcached redis-server
  "$@"
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
