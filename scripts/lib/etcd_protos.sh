#!/usr/bin/env bash
# Puts etcd's v3 API .proto files (and the gogoproto and google/api files
# they import) under DEST, from Debian's Go source packages, so that the
# build can generate etcd's gRPC client without the repository carrying
# etcd's files:
#
#   scripts/lib/etcd_protos.sh DEST
#
# The include roots are then
#   DEST/usr/share/gocode/src/go.etcd.io             (etcd/etcdserver/etcdserverpb/rpc.proto, ...)
#   DEST/usr/share/gocode/src/github.com/gogo/protobuf    (gogoproto/gogo.proto)
#   DEST/usr/share/gocode/src/github.com/gogo/googleapis  (google/api/annotations.proto)
#   /usr/include                                     (google/protobuf/descriptor.proto)
# Idempotent: nothing to do (and no network needed) once DEST has them.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 DEST" >&2
  exit 2
fi
dest="${1%/}"
src=usr/share/gocode/src
needed=(
  "$src/go.etcd.io/etcd/etcdserver/etcdserverpb/rpc.proto"
  "$src/go.etcd.io/etcd/mvcc/mvccpb/kv.proto"
  "$src/go.etcd.io/etcd/auth/authpb/auth.proto"
  "$src/github.com/gogo/protobuf/gogoproto/gogo.proto"
  "$src/github.com/gogo/googleapis/google/api/annotations.proto"
  "$src/github.com/gogo/googleapis/google/api/http.proto"
)
packages=(golang-etcd-server-dev golang-github-gogo-protobuf-dev golang-github-gogo-googleapis-dev)

if [ -f "$dest/${needed[0]}" ]; then
  exit 0
fi

mkdir -p "$(dirname "$dest")"
# Downloaded and unpacked beside DEST, then moved into place in one step:
# an interrupted run leaves no DEST that looks complete and is not.
work="$(mktemp -d "$dest.tmp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/debs" "$work/root"

download() { (cd "$work/debs" && apt-get download -q "${packages[@]}"); }
if ! download; then
  # Usually package lists that are missing (a fresh container) or stale
  # (the version they name is gone from the mirror).
  echo "etcd_protos: apt-get download failed; updating the package lists and retrying" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "etcd_protos: need root or sudo for apt-get update" >&2; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -q
  rm -f "$work"/debs/*
  download
fi

for deb in "$work"/debs/*.deb; do
  dpkg -x "$deb" "$work/root"
done
for f in "${needed[@]}"; do
  if [ ! -f "$work/root/$f" ]; then
    echo "etcd_protos: $f is not in ${packages[*]} (a different version?)" >&2
    exit 1
  fi
done

rm -rf "$dest"
mv "$work/root" "$dest"
echo "etcd_protos: etcd's .proto files are in $dest"
