#!/usr/bin/env bash
# Makes the TLS files of an etcd for rkv with Debian's openssl: a CA, a
# certificate for the members (clients and peers reach them under the
# names given), and the kvcoords' client certificate; etcd trusts only
# certificates of this CA (docs/DEPLOY.md).
#
#   deploy/etcd-certs.sh DIR NAME[,NAME...]
#
# NAME: every address or DNS name a member is reached at, e.g.
#   10.0.0.1,10.0.0.2,10.0.0.3,etcd1,etcd2,etcd3            (systemd, three nodes)
#   '*.etcd.rkv.svc.cluster.local,*.etcd.rkv.svc'           (deploy/k8s/rkv.yaml)
# localhost and 127.0.0.1 are added. In DIR: ca.crt and ca.key (kept if
# there: run it again for new member certificates of the same CA),
# server.crt/.key and peer.crt/.key for the members, kvcoord.crt/.key for
# the kvcoords. Keys are mode 0600; ca.key need not leave the machine.
# The client certificate's common name, kvcoord, is the etcd user it acts
# as once etcd's authentication is enabled.
set -euo pipefail

dir="${1:?usage: etcd-certs.sh DIR NAME[,NAME...]}"
names="${2:?usage: etcd-certs.sh DIR NAME[,NAME...]}"
command -v openssl >/dev/null || { echo "etcd-certs: no openssl (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$dir"
umask 077

san="DNS:localhost,IP:127.0.0.1"
IFS=',' read -ra list <<<"$names"
for n in "${list[@]}"; do
  [ -n "$n" ] || continue
  if [[ "$n" =~ ^[0-9.]+$ || "$n" == *:* ]]; then san="$san,IP:$n"; else san="$san,DNS:$n"; fi
done

# P-256 keys: etcd (Go) and the kvcoords' gRPC both take them.
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [ ! -f "$dir/ca.key" ] || [ ! -f "$dir/ca.crt" ]; then
  newkey "$dir/ca.key"
  openssl req -x509 -new -key "$dir/ca.key" -subj "/CN=rkv etcd CA" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$dir/ca.crt"
fi

# sign NAME CN EXTENSIONS: NAME.key and NAME.crt, signed by the CA.
sign() {
  newkey "$dir/$1.key"
  openssl req -new -key "$dir/$1.key" -subj "/CN=$2" -out "$dir/$1.csr"
  openssl x509 -req -in "$dir/$1.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAserial "$dir/ca.srl" -CAcreateserial -days 825 -sha256 \
    -extfile <(printf '%s\n' "$3") -out "$dir/$1.crt" 2>/dev/null
  rm -f "$dir/$1.csr"
}
# Members present these to clients and to each other, and peers also as
# clients: both usages.
member="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san"
sign server etcd "$member"
sign peer etcd-peer "$member"
sign kvcoord kvcoord "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
chmod 0644 "$dir"/*.crt
echo "etcd-certs: ca.crt, server, peer (for $san) and kvcoord certificates in $dir"
