#!/usr/bin/env bash
# deploy/systemd/etcd.default and deploy/etcd-certs.sh, run: three etcd
# members on loopback, each configured by nothing but a copy of the example
# file (its addresses moved to free local ports, its paths to a temporary
# folder) as Debian's etcd.service would pass it, with the certificates the
# script makes. Then: the kvcoord certificate is served (health, a put and
# a get under /rkv); a client without a certificate, and one in plain
# text, are refused; the metrics listener answers /health.
#
#   tests/deploy/etcd_example.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/proc.sh

for tool in etcd etcdctl openssl; do
  command -v "$tool" >/dev/null || { echo "etcd example: no $tool here; not run"; exit 0; }
done
work="$(mktemp -d /tmp/rkv-etcd-example.XXXXXX)"
pids=()
cleanup() {
  local p start
  for p in "${pids[@]}"; do
    start="$(proc_start_time "$p")"
    [ -n "$start" ] || continue
    kill "$p" 2>/dev/null || true
    proc_wait_gone "$p" "$start" 10 || kill -9 "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  for log in "$work"/etcd*.log; do [ -f "$log" ] && tail -n 5 "$log" >&2; done
  echo "etcd example: $*" >&2
  exit 1
}

bash deploy/etcd-certs.sh "$work/pki" etcd1,etcd2,etcd3 >/dev/null
# Ports: clients BASE..BASE+2, peers BASE+3..BASE+5, metrics BASE+6..BASE+8.
base=$(proc_pick_ports 32000 32700 10)
client() { echo $((base + $1 - 1)); }
peer() { echo $((base + 3 + $1 - 1)); }
metrics() { echo $((base + 6 + $1 - 1)); }

# The example is node 1's: node i has its own name and four addresses.
for i in 1 2 3; do
  sed -e "s/^ETCD_NAME=.*/ETCD_NAME=etcd$i/" \
    -e "/^ETCD_\(LISTEN_CLIENT\|ADVERTISE_CLIENT\|LISTEN_PEER\|INITIAL_ADVERTISE_PEER\)_URLS=/s/10\.0\.0\.1:/10.0.0.$i:/" \
    -e "s/10\.0\.0\.1:2379/127.0.0.1:$(client 1)/g; s/10\.0\.0\.2:2379/127.0.0.1:$(client 2)/g" \
    -e "s/10\.0\.0\.3:2379/127.0.0.1:$(client 3)/g; s/10\.0\.0\.1:2380/127.0.0.1:$(peer 1)/g" \
    -e "s/10\.0\.0\.2:2380/127.0.0.1:$(peer 2)/g; s/10\.0\.0\.3:2380/127.0.0.1:$(peer 3)/g" \
    -e "s|127\.0\.0\.1:2381|127.0.0.1:$(metrics "$i")|" \
    -e "s|/etc/etcd/pki|$work/pki|g" \
    -e "s|^ETCD_DATA_DIR=.*|ETCD_DATA_DIR=$work/etcd$i|" \
    deploy/systemd/etcd.default >"$work/etcd$i.env"
  moved=$(grep -v '^#' "$work/etcd$i.env" | grep '10\.0\.0\.' || true)
  [ -z "$moved" ] || fail "an address of the example was not moved: $moved"
  # Only the file's variables, as systemd's EnvironmentFile= gives them.
  env -i PATH="$PATH" bash -c 'set -a; source "$1"; set +a; exec etcd' etcd "$work/etcd$i.env" \
    >"$work/etcd$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  proc_wait_port "${pids[$((i - 1))]}" "127.0.0.1:$(client "$i")" || fail "member etcd$i did not start"
done

endpoints="https://127.0.0.1:$(client 1),https://127.0.0.1:$(client 2),https://127.0.0.1:$(client 3)"
ctl() { timeout 10 etcdctl --dial-timeout=1s --command-timeout=2s --endpoints="$endpoints" "$@"; }
kvcoord_tls=(--cacert="$work/pki/ca.crt" --cert="$work/pki/kvcoord.crt" --key="$work/pki/kvcoord.key")
deadline=$((SECONDS + 30))
until ctl "${kvcoord_tls[@]}" endpoint health >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || fail "the three members are not healthy after 30 s"
  sleep 0.1
done
ctl "${kvcoord_tls[@]}" put /rkv/example ok >/dev/null || fail "the kvcoord certificate cannot write"
[ "$(ctl "${kvcoord_tls[@]}" get --print-value-only /rkv/example)" = ok ] ||
  fail "the kvcoord certificate cannot read back"
if ctl --cacert="$work/pki/ca.crt" get /rkv/example >/dev/null 2>&1; then
  fail "a client without a certificate was served"
fi
if timeout 10 etcdctl --dial-timeout=1s --command-timeout=2s \
  --endpoints="http://127.0.0.1:$(client 1)" get /rkv/example >/dev/null 2>&1; then
  fail "a plain-text client was served"
fi
# The metrics listener: plain HTTP on loopback.
health=$(timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf "GET /health HTTP/1.0\r\n\r\n" >&3; cat <&3' \
  _ "$(metrics 1)" || true)
grep -q '"health":"true"' <<<"$health" || fail "no healthy /health on the metrics port: $health"
echo "etcd example: three members from deploy/systemd/etcd.default serve the kvcoord certificate over TLS and refuse others"
