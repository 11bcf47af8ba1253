#!/usr/bin/env bash
# What the cluster simulation alone runs of the code it is there to check:
# a --coverage build (gcc's gcov, from Debian's gcc) of cluster_simulation_test,
# run over some seeds, then the share of lines it ran in the agent's core, the
# coordinator's, the etcd store's and the cluster client's files.
#
#   scripts/coverage.sh [--seeds=N] [--min=PERCENT] [--missed]
#
# --seeds: seeds to run (default 200; the coverage build runs unoptimized).
# --min: fail when a file is below this share (default: report only).
# --missed: name the lines not run.
# The build lands in build-cov/.
set -euo pipefail
cd "$(dirname "$0")/.."

seeds=200
min=""
missed=""
for arg in "$@"; do
  case "$arg" in
    --seeds=*) seeds="${arg#--seeds=}" ;;
    --min=*) min="--min=${arg#--min=}" ;;
    --missed) missed="--missed" ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "coverage.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
[[ "$seeds" =~ ^[1-9][0-9]*$ ]] || { echo "coverage.sh: --seeds must be a positive number" >&2; exit 2; }

bash scripts/install-deps.sh >/dev/null
cmake -S . -B build-cov -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="--coverage" \
  -DCMAKE_EXE_LINKER_FLAGS="--coverage" -DRKV_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build-cov -j "$(nproc)" --target cluster_simulation_test
# Counts from an earlier run would add to this one's.
find build-cov -name '*.gcda' -delete
RKV_SIM_SEEDS="$seeds" build-cov/bin/cluster_simulation_test >build-cov/simulation.log 2>&1 ||
  { tail -n 30 build-cov/simulation.log >&2; echo "coverage.sh: the simulation failed" >&2; exit 1; }

echo "cluster_simulation_test, $seeds seeds: lines run"
python3 scripts/lib/coverage_report.py build-cov . $min $missed \
  server/kvserver/agent_core.cc \
  server/kvcoord/coordinator.cc \
  server/kvcoord/replica_groups.cc \
  server/kvcoord/etcd_state_store.cc \
  client/cluster/cluster_client.cc \
  client/cluster/group_sessions.cc \
  client/cluster/map_watcher.cc \
  client/cluster/retry_policy.cc \
  client/cluster/routing.cc \
  client/cluster/op_pool.cc
