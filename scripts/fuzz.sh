#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (in build-fuzz/, instrumented with
# ASan and UBSan) and runs one of them for as long as asked, keeping its
# corpus in build-fuzz/corpus/TARGET so that later runs start from it.
#
#   scripts/fuzz.sh                       list the targets
#   scripts/fuzz.sh TARGET [SECONDS]      run TARGET (default 600 s)
#   scripts/fuzz.sh --build-only          just build them
#
# Targets: soft_wire_fuzz (the soft fabric's frame decoders),
# region_format_fuzz (slots, KV blocks, free-pool nodes, region headers).
# A crash leaves crash-* in the current folder; replay it with
# build-fuzz/bin/TARGET crash-FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh clang libclang-rt-14-dev
CXX=clang++ cmake -S . -B build-fuzz -DRKV_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target rkv_fuzzers
case "${1:-}" in
  --build-only) exit 0 ;;
  ""|-h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
target="$1"
seconds="${2:-600}"
[ -x "build-fuzz/bin/$target" ] || { echo "fuzz.sh: no target '$target'" >&2; exit 2; }
mkdir -p "build-fuzz/corpus/$target"
exec "build-fuzz/bin/$target" "build-fuzz/corpus/$target" -max_total_time="$seconds" -timeout=10
