#!/bin/bash
# lab/guest/stage2.sh: second boot stage of a lab guest (runs as PID 1 after
# switch_root). Brings up the two links and the two rxe devices, then runs the
# job agent until the host asks for a power-off.
#
#   link A: eth0 10.77.0.N/24 -> rxe0        link B: eth1 10.77.1.N/24 -> rxe1
#   (N = 1 for g1, 2 for g2)
set -uo pipefail # PID 1 must not exit on a failed command: it would panic the guest
export PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb LANG=C
read -ra cmdline </proc/cmdline
for a in "${cmdline[@]}"; do
	case $a in
	ibpath.id=*) export LAB_ID=${a#ibpath.id=} ;;
	ibpath.work=*) export LAB_WORK=${a#ibpath.work=} ;;
	ibpath.repo=*) export LAB_REPO=${a#ibpath.repo=} ;;
	esac
done
export LAB_BUILD=$LAB_WORK/build LAB_RUN=$LAB_WORK/run
ts() { cut -d' ' -f1 /proc/uptime; }
say() { echo "[$LAB_ID uptime $(ts)] $*"; }
halt() { say "power off: $*"; sync; busybox poweroff -f; sleep 10; }

hostname "$LAB_ID"
# on-demand module loads use the extracted kernel's modules
printf '#!/bin/sh\nexec /usr/sbin/modprobe -d %s/kroot "$@"\n' "$LAB_BUILD" >/modprobe
chmod +x /modprobe
echo /modprobe >/proc/sys/kernel/modprobe
ulimit -l unlimited
say "GUEST_BOOTED"

N=${LAB_ID#g}
ip link set lo up
for i in 0 1; do
	# No IPv6 on the links: its link-local address would be a GID of its
	# own, which can take index 1 before the IPv4 one (seen once in a
	# boot); the rows name the IPv4 GID as index 1 (-g 1, -x 1).
	[ -e /proc/sys/net/ipv6/conf/eth$i/disable_ipv6 ] && echo 1 >/proc/sys/net/ipv6/conf/eth$i/disable_ipv6
	ip link set eth$i up || halt "no eth$i"
	ip addr add "10.77.$i.$N/24" dev "eth$i"
	rdma link add rxe$i type rxe netdev eth$i || halt "rdma link add rxe$i failed"
done
for i in 0 1; do
	for _ in $(seq 1 100); do
		rdma link show rxe$i/1 | grep -q 'state ACTIVE' && break
		sleep 0.1
	done
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' 10 77 "$i" "$N")
	for _ in $(seq 1 50); do
		[ "$(cat /sys/class/infiniband/rxe$i/ports/1/gids/1)" = "$want" ] && break
		sleep 0.1
	done
	got=$(cat /sys/class/infiniband/rxe$i/ports/1/gids/1)
	if [ "$got" != "$want" ]; then
		for k in 0 1 2 3; do say "rxe$i GID $k: $(cat /sys/class/infiniband/rxe$i/ports/1/gids/$k)"; done
		halt "rxe$i GID index 1 is $got, want $want (10.77.$i.$N, which the rows name as index 1)"
	fi
done
rdma link | sed "s/^/[$LAB_ID] /"
say "RXE_UP"
exec bash "$LAB_REPO/lab/guest/agent.sh"
