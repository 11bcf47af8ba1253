#!/usr/bin/env bash
# Proof that the simulations find bugs: each mutation below undoes one fix
# or one safeguard of the control plane, the agent or the cluster client.
# One at a time, it is applied, cluster_simulation_test and
# etcd_state_store_sim_test are rebuilt in build/ and run over their default
# seeds (what CI runs), and the first seed each fails on is printed. The
# source is restored after each, and build/ rebuilt from it at the end.
#
#   scripts/mutations.sh [NAME ...]
#
# With no NAME, every mutation runs. A mutation that no simulation catches
# makes the script exit 1. The files it mutates must have no uncommitted
# changes.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t all < <(python3 scripts/lib/mutation.py list)
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=("${all[@]}")
for n in "${names[@]}"; do
  [[ " ${all[*]} " == *" $n "* ]] || { echo "mutations.sh: no mutation '$n' (there are: ${all[*]})" >&2; exit 2; }
done
[[ -d build ]] || { echo "mutations.sh: build/ is missing; run scripts/build.sh first" >&2; exit 2; }

tests=(cluster_simulation_test etcd_state_store_sim_test)
missed=0
restore() { python3 scripts/lib/mutation.py restore; }
trap restore EXIT
for n in "${names[@]}"; do
  python3 scripts/lib/mutation.py apply "$n"
  echo "== $n: $(python3 scripts/lib/mutation.py describe "$n")"
  cmake --build build -j "$(nproc)" --target "${tests[@]}" >/dev/null
  caught=0
  for t in "${tests[@]}"; do
    start=$(date +%s)
    if out=$(build/bin/"$t" 2>&1); then
      echo "   $t: passed every seed ($(($(date +%s) - start)) s)"
    else
      caught=1
      seed=$(grep -m1 -oE 'RKV_SIM_SEED=[0-9]+' <<<"$out" || true)
      what=$(grep -m1 -oE 'seed [0-9]+: .*' <<<"$out" | cut -c1-200 || true)
      echo "   $t: FAILED at ${seed:-?} ($(($(date +%s) - start)) s): $what"
    fi
  done
  [[ $caught == 1 ]] || { echo "   not caught"; missed=1; }
  restore
done
trap - EXIT
cmake --build build -j "$(nproc)" --target "${tests[@]}" >/dev/null
exit $missed
