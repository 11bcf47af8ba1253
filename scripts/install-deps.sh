#!/usr/bin/env bash
# Installs the Debian 12 packages rkv builds and tests with, and any extra
# packages named as arguments (scripts/bench.sh asks for gnuplot-nox).
# With --runtime first, only the packages the built programs run with.
# Full mode also unpacks etcd's .proto files into .deps/etcd-proto (see
# scripts/lib/etcd_protos.sh), from which the build generates its etcd
# client. Idempotent: does nothing (and needs no network) when every
# package is already installed and the .proto files are there.
set -euo pipefail

# --runtime: only what the built programs need to run (the container
# image's final stage), and rdma-core's tools to check a node.
runtime=0
if [ "${1:-}" = "--runtime" ]; then
  shift
  runtime=1
  PACKAGES=(
    libabsl20220623 libprotobuf32 libgrpc++1.51 libibverbs1 librdmacm1 ibverbs-providers
    rdma-core ibverbs-utils libmemcached11 libhiredis0.14
    "$@"
  )
else
  PACKAGES=(
    build-essential cmake pkg-config
    rdma-core libibverbs-dev librdmacm-dev ibverbs-utils
    libabsl-dev
    libprotobuf-dev protobuf-compiler
    libgrpc++-dev protobuf-compiler-grpc
    libgtest-dev libgmock-dev libbenchmark-dev
    # kvbench's drivers, and the servers its tests run against.
    libmemcached-dev libhiredis-dev memcached redis-server
    # The scripts read JSON (kvctl's, etcdctl's) with its json module.
    python3
    # The deployment files' checks (tests/deploy/check.sh).
    python3-yaml
    # The Python package (client/python/): its module, `pip install .` into
    # a virtualenv, its tests, and redis-py for its benchmark.
    python3-dev pybind11-dev python3-venv python3-pip python3-setuptools python3-wheel
    python3-pytest python3-redis
    # The coordinator's store; the etcd client's tests run a real cluster.
    etcd-server etcd-client
    # ss, with which the scripts wait for a process's port.
    iproute2
    # libfaketime: the clock-step test steps a server's and a client's wall
    # clock mid-run.
    faketime
    # The one formatter the tree is formatted with (scripts/format.sh).
    clang-format-14
    "$@"
  )
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "$runtime" = 0 ]; then
  root="$(cd "$(dirname "$0")/.." && pwd)"
  if [ -f "$root/scripts/lib/etcd_protos.sh" ]; then
    bash "$root/scripts/lib/etcd_protos.sh" "$root/.deps/etcd-proto"
  else
    # Copied alone (the container image's first step installs the packages
    # before the tree is there); the build's own run of this script
    # fetches them.
    echo "install-deps: no scripts/lib/etcd_protos.sh beside this script; etcd's .proto files not fetched"
  fi
fi
