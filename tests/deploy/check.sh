#!/usr/bin/env bash
# deploy/ checked: tests/deploy/check.py (manifests, flags, environment
# files, Dockerfiles), tests/deploy/etcd_example.sh (a TLS etcd from
# deploy/systemd/etcd.default and deploy/etcd-certs.sh, where etcd and
# openssl are installed), then `systemd-analyze verify` of the units where
# the tool exists. The units name /usr/local/bin, where `cmake --install` puts
# the programs; verify needs them to exist, so a copy pointing at BIN_DIR is
# what it checks.
#
#   tests/deploy/check.sh BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="$(cd "${1:?usage: check.sh BIN_DIR}" && pwd)"
python3 tests/deploy/check.py "$bin"
bash tests/deploy/etcd_example.sh

if ! command -v systemd-analyze >/dev/null; then
  echo "deploy check: no systemd-analyze on this machine; units not verified"
  exit 0
fi
work="$(mktemp -d /tmp/rkv-units.XXXXXX)"
trap 'rm -rf "$work"' EXIT
for unit in deploy/systemd/*.service; do
  sed "s|/usr/local/bin/|$bin/|" "$unit" >"$work/$(basename "$unit")"
done
cd "$work"
out="$(systemd-analyze verify kvcoord.service kvserver@s1.service 2>&1)" || {
  echo "$out"
  exit 1
}
if [ -n "$out" ]; then
  echo "$out"
  echo "deploy check: systemd-analyze verify reported the above" >&2
  exit 1
fi
echo "deploy check: systemd-analyze verify: no errors"
