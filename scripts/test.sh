#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
#
#   scripts/test.sh                  the suite on a Release build, then the
#                                    verbs tests (label rxe) on Soft-RoCE in
#                                    a QEMU guest (scripts/rdma-vm.sh)
#   scripts/test.sh --sanitizers     also under ASan+UBSan and under TSan
#   scripts/test.sh --fuzz           also the libFuzzer targets, 20 s each
#                                    (clang; scripts/fuzz.sh runs them longer)
#   scripts/test.sh --no-rxe         without the guest
#
# Extra arguments after -- go to ctest (e.g. -- -R Conformance).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitizers=0
fuzz=0
rxe=1
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitizers) sanitizers=1 ;;
    --fuzz) fuzz=1 ;;
    --no-rxe) rxe=0 ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

run_suite() {  # $1: sanitizer ('' for none)
  local sanitize="$1" dir
  case "$sanitize" in "") dir=build ;; address) dir=build-asan ;; thread) dir=build-tsan ;; esac
  echo "=== test.sh: ${sanitize:-release} build ==="
  RKV_SANITIZE="$sanitize" bash scripts/build.sh
  # Under ThreadSanitizer a server may not heartbeat within the tests'
  # 600 ms lease, and a replicated one would fence itself: a longer lease.
  local lease=""
  [ "$sanitize" = thread ] && lease=2000
  # The cluster simulation's 1,000 seeds run on the Release build; under a
  # sanitizer, which slows it tenfold or more, a sample of them.
  local sim_seeds=""
  [ -n "$sanitize" ] && sim_seeds=100
  # The rxe tests need a kernel RDMA stack: they run in the guest below.
  (cd "$dir" && RKV_TEST_LEASE_MS="${RKV_TEST_LEASE_MS:-$lease}" \
    RKV_SIM_SEEDS="${RKV_SIM_SEEDS:-$sim_seeds}" \
    ctest --output-on-failure -j "$(nproc)" --timeout 300 -LE rxe "${ctest_args[@]}")
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# tests/tsan.supp: races inside the uninstrumented gRPC libraries, not ours.
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp}"

# The cheapest checks first: every C++ file as .clang-format says, and
# every include pointing down the layers.
bash scripts/install-deps.sh
bash scripts/format.sh --check
python3 scripts/lib/check_layers.py

run_suite ""
if [ "$rxe" = 1 ]; then
  echo "=== test.sh: the verbs backend on Soft-RoCE (label rxe), in a QEMU guest ==="
  bash scripts/rdma-vm.sh --timeout=1500 -- \
    ctest --test-dir build --output-on-failure --timeout 600 -L '^rxe$' "${ctest_args[@]}"
fi
if [ "$sanitizers" = 1 ]; then
  run_suite address
  run_suite thread
fi
if [ "$fuzz" = 1 ]; then
  echo "=== test.sh: fuzz targets ==="
  bash scripts/fuzz.sh --build-only
  (cd build-fuzz && ctest --output-on-failure -L fuzz)
fi
echo "test.sh: all suites passed"
