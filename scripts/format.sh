#!/usr/bin/env bash
# Formats every C++ file in the tree with its .clang-format, by one pinned
# formatter (Debian 12's clang-format-14: other versions format differently).
#
#   scripts/format.sh            rewrites the files that are not formatted
#   scripts/format.sh --check    changes nothing; lists them and fails
#
# scripts/test.sh runs the check first, so CI fails on an unformatted file.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "format.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

formatter=clang-format-14
command -v "$formatter" >/dev/null || bash scripts/install-deps.sh
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.cc' '*.h' | while read -r f; do
  [ -e "$f" ] && echo "$f"; done)

if [ "$check" = 0 ]; then
  "$formatter" -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$formatter" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format.sh: ${#bad[@]} file(s) differ from .clang-format (scripts/format.sh fixes them):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format.sh: all ${#files[@]} C++ files formatted"
