#!/usr/bin/env bash
# The Python client's tests (pytest) against a live local cluster: installs
# the package with `pip install --no-build-isolation .` into a fresh
# virtualenv (reusing BUILD_DIR's build of it), starts two servers on the
# soft fabric (one copy each) and a kvcoord, runs test_client.py, then
# kills one server and runs test_server_lost.py. Everything started here
# is stopped here.
#
#   tests/python/run.sh BUILD_DIR PYTHON
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh
build="$(cd "${1:?usage: run.sh BUILD_DIR PYTHON}" && pwd)"
python="${2:?usage: run.sh BUILD_DIR PYTHON}"
export RKV_BIN="$build/bin"
export RKV_CLUSTER_DIR="$(mktemp -d /tmp/rkv-python.XXXXXX)"
export RKV_PORT_BASE=$(proc_pick_ports 17000 18000)
export RKV_ETCD_MEMBERS=0 RKV_REPLICAS=1
cleanup() {
  bash scripts/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$RKV_CLUSTER_DIR"
}
trap cleanup EXIT

# The install a user makes (docs/PYTHON.md), into a virtualenv that sees
# Debian's packages (setuptools, wheel, pytest), from this build's module.
venv="$RKV_CLUSTER_DIR/venv"
"$python" -m venv --system-site-packages "$venv"
RKV_BUILD_DIR="$build" "$venv/bin/pip" install --quiet --no-build-isolation --no-deps --no-index \
  --disable-pip-version-check . >"$RKV_CLUSTER_DIR/pip.log" 2>&1 ||
  { cat "$RKV_CLUSTER_DIR/pip.log" >&2; echo "run.sh: pip install . failed" >&2; exit 1; }
# Imported from the virtualenv, not from the checkout.
(cd /tmp && "$venv/bin/python" -c 'import rkv, sys; assert rkv.__file__.startswith(sys.prefix), rkv.__file__')

bash scripts/cluster.sh start 2 >/dev/null
bash scripts/cluster.sh wait-serving >/dev/null
export RKV_COORDINATOR=$(bash scripts/cluster.sh coordinators)
export RKV_TOKEN_FILE="$RKV_CLUSTER_DIR/token"
pytest() { (cd /tmp && "$venv/bin/python" -m pytest -p no:cacheprovider -q "$OLDPWD/tests/python/$1"); }
pytest test_client.py
bash scripts/cluster.sh kill s2 >/dev/null
bash scripts/cluster.sh wait s2 down >/dev/null
pytest test_server_lost.py
