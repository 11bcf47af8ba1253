#!/usr/bin/env bash
# Runs a command inside a QEMU guest that has a real kernel RDMA stack: Debian
# 12's own kernel with Soft-RoCE (rdma_rxe), for the verbs backend's tests on a
# machine whose own kernel has no RDMA.
#
#   scripts/rdma-vm.sh [options] -- COMMAND [ARGS...]
#
#   --timeout=SECONDS   kill the guest after this long (default 1800); exit 124
#   --memory=MIB        guest memory (default 4096)
#   --cpus=N            guest CPUs (default: this machine's, at most 4)
#   --shell             an interactive shell in the guest instead of COMMAND
#
# The guest sees this machine's whole file system read-only, with a tmpfs
# over it that takes its writes and is gone when it stops: COMMAND runs as
# root in the current directory with the host's programs and libraries, and
# nothing it writes reaches the host. Its output streams to stdout; the
# script exits with COMMAND's status. The guest has no network device to the
# host (-nic none); it has two "hosts" of its own instead, joined by a veth
# pair that traffic really crosses (so tc netem and link faults apply):
#
#   veth0 192.0.2.1 with rxe0     RKV_RXE_CLIENT_ADDR, RKV_RXE_CLIENT_DEVICE
#   veth1 192.0.2.2 with rxe1     RKV_RXE_SERVER_ADDR, RKV_RXE_SERVER_DEVICE
#
# (RKV_RXE_ROUTES restores the routes between them after a link was down)
# and RKV_VERBS_TEST_* point the verbs tests at them, with RKV_REQUIRE_VERBS
# set so that they fail rather than skip.
#
# The kernel (Debian's linux-image package, fetched with apt-get download) and
# the initramfs are cached in build/rdma-vm/. Under emulation (TCG) the guest
# is slow: nothing measured in it is a performance figure.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

timeout_s=1800
memory=4096
cpus=$(nproc); [ "$cpus" -gt 4 ] && cpus=4
shell=0
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout=*) timeout_s=${1#*=} ;;
    --memory=*) memory=${1#*=} ;;
    --cpus=*) cpus=${1#*=} ;;
    --shell) shell=1 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "rdma-vm.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$shell" = 0 ] && [ $# -eq 0 ]; then
  echo "rdma-vm.sh: no command given (try --help)" >&2; exit 2
fi
for v in "$timeout_s" "$memory" "$cpus"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "rdma-vm.sh: '$v' is not a positive integer" >&2; exit 2; }
done

bash scripts/install-deps.sh qemu-system-x86 busybox-static cpio kmod iproute2 rdmacm-utils >&2

cache="$repo/build/rdma-vm"
mkdir -p "$cache"

# --- The kernel: linux-image-amd64 names the exact package of the day. ---
kernel_package() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n 1
}
pkg=$(kernel_package)
if [ -z "$pkg" ]; then
  apt-get update -q >&2
  pkg=$(kernel_package)
fi
[ -n "$pkg" ] || { echo "rdma-vm.sh: apt knows no linux-image-amd64 package" >&2; exit 1; }
kver=${pkg#linux-image-}
kdir="$cache/$pkg"
if [ ! -f "$kdir/boot/vmlinuz-$kver" ]; then
  echo "rdma-vm.sh: fetching $pkg" >&2
  rm -rf "$kdir" "$cache/dl"; mkdir -p "$cache/dl"
  # By its exact name: a glob would fetch every kernel Debian has.
  (cd "$cache/dl" && apt-get download -q "$pkg" >&2)
  dpkg -x "$cache"/dl/"$pkg"_*.deb "$kdir.tmp"
  depmod -b "$kdir.tmp" "$kver"
  rm -rf "$cache/dl"
  mv "$kdir.tmp" "$kdir"
fi

# --- The initramfs: busybox, the modules the guest needs, and /init. ---
modules=(virtio_pci 9pnet_virtio 9p overlay crc32_generic rdma_rxe rdma_ucm ib_uverbs
         veth sch_netem)
init_script() {
  cat <<'INIT'
#!/bin/sh
# Mounts the host's root through 9p under a tmpfs overlay, then runs the
# script named by rkv.run= in it and powers off.
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in @MODULES@; do modprobe "$m" || echo "rdma-vm: modprobe $m failed"; done
run=; for a in $(cat /proc/cmdline); do case "$a" in rkv.run=*) run=${a#rkv.run=} ;; esac; done
status=1
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro host /lower &&
   mount -t tmpfs -o size=75% upper /upper && mkdir -p /upper/u /upper/w &&
   mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w root /root; then
  mount -t proc proc /root/proc; mount -t sysfs sys /root/sys
  mount -t devtmpfs dev /root/dev; mkdir -p /root/dev/pts /root/dev/shm
  mount -t devpts devpts /root/dev/pts; mount -t tmpfs shm /root/dev/shm
  # Nothing else is mounted over the host's tree: the overlay already takes
  # every write, and a checkout may well live under /tmp.
  chroot /root /bin/bash "$run" </dev/console >/dev/console 2>&1
  status=$?
else
  echo "rdma-vm: cannot mount the host's file system"
fi
printf "\nrdma-vm: exit status %s\n" "$status"
poweroff -f
INIT
}
initrd="$cache/initrd-$kver.cpio.gz"
stamp=$( (init_script; echo "${modules[*]}") | sha256sum | cut -c1-16)
if [ ! -f "$initrd" ] || [ "$(cat "$initrd.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "rdma-vm.sh: building the initramfs" >&2
  ir="$cache/initramfs"
  rm -rf "$ir"; mkdir -p "$ir"/{bin,proc,sys,dev,lower,upper,root,lib/modules/"$kver"}
  cp /bin/busybox "$ir/bin/"
  for a in sh mount mkdir modprobe insmod poweroff cat echo chroot; do ln -s busybox "$ir/bin/$a"; done
  # The kernel's own module requests run /sbin/modprobe.
  mkdir -p "$ir/sbin"; ln -s ../bin/busybox "$ir/sbin/modprobe"
  for m in "${modules[@]}"; do
    modprobe -d "$kdir" -S "$kver" --show-depends "$m"
  done | awk '$1 == "insmod" {print $2}' | sort -u | while read -r ko; do
    rel=${ko#"$kdir"/}
    mkdir -p "$ir/$(dirname "$rel")"; cp "$ko" "$ir/$rel"
  done
  cp "$kdir/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} "$ir/lib/modules/$kver/"
  depmod -b "$ir" "$kver"
  init_script | sed "s/@MODULES@/${modules[*]}/" > "$ir/init"; chmod +x "$ir/init"
  (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd.tmp"
  mv "$initrd.tmp" "$initrd"; echo "$stamp" > "$initrd.stamp"; rm -rf "$ir"
fi

# --- What runs inside: the two hosts, then the command. ---
run_dir="$cache/run"; mkdir -p "$run_dir"
run=$(mktemp "$run_dir/run.XXXXXX")
log=$(mktemp "$run_dir/console.XXXXXX")
trap 'rm -f "$run" "$log"' EXIT
{
  cat <<'NET'
set -e
ip link set lo up
ip link add veth0 type veth peer name veth1
ip addr add 192.0.2.1/24 dev veth0
ip addr add 192.0.2.2/24 dev veth1
ip link set veth0 up
ip link set veth1 up
# Both addresses are local, so the kernel would carry traffic between them
# on lo. Route each out through its own end of the pair instead, and let
# the other end accept packets from a local source, so that every packet
# crosses the veth (rxe refuses lo, and faults on the pair must apply).
for c in all veth0 veth1; do
  echo 1 > /proc/sys/net/ipv4/conf/$c/accept_local
  echo 0 > /proc/sys/net/ipv4/conf/$c/rp_filter
done
ip rule add pref 1000 lookup local
ip rule del pref 0
ip rule add pref 10 iif lo to 192.0.2.2 lookup 100
ip rule add pref 11 iif lo to 192.0.2.1 lookup 101
# Taking a link down deletes its routes and neighbours: tests that do so
# run this again once it is up.
cat > /run/rkv-rxe-routes <<'ROUTES'
ip route replace 192.0.2.2 dev veth0 src 192.0.2.1 table 100
ip route replace 192.0.2.1 dev veth1 src 192.0.2.2 table 101
# Fixed neighbours: ARP between two local addresses is not worth trusting,
# and a connection's first resolution should not wait on it.
ip neigh replace 192.0.2.2 lladdr "$(cat /sys/class/net/veth1/address)" dev veth0 nud permanent
ip neigh replace 192.0.2.1 lladdr "$(cat /sys/class/net/veth0/address)" dev veth1 nud permanent
ROUTES
. /run/rkv-rxe-routes
rdma link add rxe0 type rxe netdev veth0
rdma link add rxe1 type rxe netdev veth1
export RKV_RXE_CLIENT_ADDR=192.0.2.1 RKV_RXE_CLIENT_DEVICE=rxe0
export RKV_RXE_SERVER_ADDR=192.0.2.2 RKV_RXE_SERVER_DEVICE=rxe1
export RKV_IN_RDMA_VM=1 RKV_RXE_ROUTES=/run/rkv-rxe-routes
# The verbs tests: run, never skip.
export RKV_VERBS_TEST_ADDRESS=192.0.2.2:0 RKV_VERBS_TEST_DEVICE=rxe1
export RKV_VERBS_TEST_INITIATOR_DEVICE=rxe0 RKV_REQUIRE_VERBS=1
ulimit -l unlimited
set +e
NET
  # The caller's environment, but for what the guest sets itself.
  export -p | grep -vE '^declare -x (HOME|HOSTNAME|OLDPWD|PWD|SHLVL|TERM|_)='
  printf 'cd %q\n' "$PWD"
  if [ "$shell" = 1 ]; then
    echo 'exec /bin/bash -i'
  else
    printf 'exec'; printf ' %q' "$@"; printf '\n'
  fi
} > "$run"

accel=(-accel tcg -cpu max)  # KVM guests hang on these machines; TCG works.
set +e
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 "${accel[@]}" \
  -m "$memory" -smp "$cpus" -nographic -no-reboot -nic none \
  -kernel "$kdir/boot/vmlinuz-$kver" -initrd "$initrd" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4 rkv.run=$run" \
  -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
  2>&1 | tee "$log" | sed -u -e 's/\r//g' -e '/\[?7l\|SeaBIOS\|Booting from ROM/d'
qemu_status=${PIPESTATUS[0]}
set -e
if [ "$qemu_status" = 124 ] || [ "$qemu_status" = 137 ]; then
  echo "rdma-vm.sh: the guest ran past --timeout=$timeout_s and was killed" >&2
  exit 124
fi
status=$(tr -d '\r' < "$log" | sed -n 's/^rdma-vm: exit status \([0-9]*\)$/\1/p' | tail -n 1)
if [ -z "$status" ]; then
  echo "rdma-vm.sh: the guest stopped without reporting a status (qemu exit $qemu_status)" >&2
  exit 1
fi
exit "$status"
