#!/usr/bin/env bash
# Configures and builds rkv. Programs land in build/bin/.
#
#   scripts/build.sh                 Release build in build/
#   RKV_SANITIZE=address scripts/build.sh   ASan+UBSan build in build-asan/
#   RKV_SANITIZE=thread  scripts/build.sh   TSan build in build-tsan/
#
# BUILD_DIR overrides the folder, BUILD_TYPE the CMake build type.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

sanitize="${RKV_SANITIZE:-}"
case "$sanitize" in
  "") default_dir=build; default_type=Release ;;
  address) default_dir=build-asan; default_type=RelWithDebInfo ;;
  thread) default_dir=build-tsan; default_type=RelWithDebInfo ;;
  *) echo "build.sh: RKV_SANITIZE must be empty, 'address' or 'thread'" >&2; exit 2 ;;
esac
dir="${BUILD_DIR:-$default_dir}"
type="${BUILD_TYPE:-$default_type}"

cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DRKV_SANITIZE="$sanitize" >/dev/null
cmake --build "$dir" -j "$(nproc)"
echo "build.sh: built $dir ($type${sanitize:+, $sanitize sanitizer})"
