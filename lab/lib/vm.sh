# shellcheck shell=bash
# lab/lib/vm.sh: the two guests seen from the host: boot, jobs, cable pulls,
# shutdown. Sourced by lab/run.sh after lib/common.sh.
#
# Topology: link A = g1 eth0 <-> g2 eth0, link B = g1 eth1 <-> g2 eth1. Each
# link is a pair of QEMU UDP socket netdevs on 127.0.0.1 (netdev ids n0, n1),
# a point-to-point cable that the host can pull with "set_link nX off" on the
# guest's QEMU monitor ($LAB_RUN/<guest>.mon).

# vm_nic GUEST LINK: QEMU args of guest GUEST's end of link LINK (0 = A, 1 = B).
vm_nic() {
	local n=${1#g} l=$2 base=$((LAB_PORT_BASE + 10 * $2))
	local me=$((base + n - 1)) peer=$((base + 2 - n))
	echo "-netdev socket,id=n$l,udp=127.0.0.1:$peer,localaddr=127.0.0.1:$me"
	echo "-device virtio-net-pci,netdev=n$l,romfile=,mac=52:54:00:00:0$n:0$l"
	# LAB_PCAP=1: g1's end of each link written to $LAB_RUN/link-A.pcap and
	# link-B.pcap (both directions; the first LAB_PCAP_LEN bytes of each
	# frame, enough for the RoCE headers) for lab/pcap.py to read
	if [ "${LAB_PCAP:-0}" = 1 ] && [ "$n" = 1 ]; then
		echo "-object filter-dump,id=d$l,netdev=n$l,file=$LAB_RUN/link-$([ "$l" = 0 ] && echo A || echo B).pcap,maxlen=${LAB_PCAP_LEN:-128}"
	fi
}
LAB_PORT_BASE=${LAB_PORT_BASE:-41700}

# vm_start GUEST: start QEMU for GUEST in the background, killed after LAB_DEADLINE.
vm_start() {
	local g=$1 accel
	# shellcheck disable=SC2054 # tcg,thread=multi is one qemu argument
	case $LAB_ACCEL in
	kvm) accel=(-enable-kvm -cpu host) ;;
	*) accel=(-accel tcg,thread=multi -cpu max -bios /usr/share/qemu/qboot.rom) ;;
	esac
	rm -f "$LAB_RUN/$g.ready" "$LAB_RUN/$g.mon"
	rm -rf "$LAB_RUN/q/$g" # jobs left by an interrupted run (a poweroff among them) must not reach the new guest
	mkdir -p "$LAB_RUN/q/$g"
	# LAB_PIN=1: each guest's QEMU on a host CPU of its own (g1 on CPU 0,
	# g2 on CPU 1), for steadier with/without ratios
	local pin=()
	if [ "${LAB_PIN:-0}" = 1 ] && [ "$(nproc)" -ge 2 ]; then
		pin=(taskset -c "$((${g#g} - 1))")
	fi
	# shellcheck disable=SC2046
	setsid "${pin[@]}" timeout -k 5 "$LAB_DEADLINE" qemu-system-x86_64 "${accel[@]}" -smp 1 -m "$LAB_MEM" \
		-nographic -no-reboot -nodefaults -serial stdio -machine pc,graphics=off \
		-kernel "$LAB_BUILD/vmlinux" -initrd "$LAB_BUILD/initramfs.gz" \
		-append "console=ttyS0 quiet panic=-1 ibpath.id=$g ibpath.work=$LAB_WORK ibpath.repo=$LAB_REPO" \
		-virtfs local,path=/usr,mount_tag=hostusr,security_model=none,readonly=on,multidevs=remap \
		-virtfs local,path=/etc,mount_tag=hostetc,security_model=none,readonly=on,multidevs=remap \
		-virtfs "local,path=$LAB_WORK,mount_tag=work,security_model=none,multidevs=remap" \
		-virtfs "local,path=$LAB_REPO,mount_tag=repo,security_model=none,readonly=on,multidevs=remap" \
		-monitor "unix:$LAB_RUN/$g.mon,server,nowait" \
		$(vm_nic "$g" 0) $(vm_nic "$g" 1) \
		</dev/null >"$LAB_RUN/$g.console" 2>&1 &
	echo $! >"$LAB_RUN/$g.pid"
	vm_priority "$!" "$g"
}

# The guests' share of the host's CPUs. The kernel's autogroup scheduling
# (/proc/sys/kernel/sched_autogroup_enabled, on in Debian's kernels) gives
# each session an equal share whatever its processes' nice values: a
# `nice -n 19` build or test in the shell that started the run took a
# third of the host from the guests and slowed the run's own steps (the
# cuts held twice as long), and rows failed (2026-11-30). Each guest's QEMU
# runs in a session of its own (setsid); vm_priority gives that session's
# autogroup the nice value LAB_QEMU_NICE (empty, the default, leaves it)
# and notes the outcome in $LAB_RUN/qemu-nice (LAB_AUTOGROUP_DIR: /proc,
# for lab/test/rows_test.sh). A negative value shields the guests from
# other sessions, and starves the run's own steps, which stay in the
# caller's session, while both guests are busy: -10 held the cuts of
# setlink rows 8 to 10 s instead of 4.
LAB_QEMU_NICE=${LAB_QEMU_NICE-}
vm_priority() { # PID GUEST
	local f=${LAB_AUTOGROUP_DIR:-/proc}/$1/autogroup note
	if [ -z "$LAB_QEMU_NICE" ]; then
		note="qemu_nice=left (LAB_QEMU_NICE empty)"
	elif [ ! -e "$f" ]; then
		note="qemu_nice=left (no autogroup scheduling here)"
	elif echo "$LAB_QEMU_NICE" 2>/dev/null >"$f"; then
		note="qemu_nice=$LAB_QEMU_NICE (autogroup)"
	else
		note="qemu_nice=left (could not write $f)"
	fi
	echo "$note" >"$LAB_RUN/qemu-nice"
	case $note in *left*) log "$2: QEMU's CPU share as it was: ${note#qemu_nice=}" ;; esac
}

vm_alive() { [ -s "$LAB_RUN/$1.pid" ] && kill -0 "$(cat "$LAB_RUN/$1.pid")" 2>/dev/null; }
vm_ready() { vm_alive "$1" && [ -e "$LAB_RUN/$1.ready" ]; }
# vm_settled GUEST: ready, or gone (a guest that powers itself off during
# boot says why on its console: no need to wait out the timeout).
vm_settled() { vm_ready "$1" || ! vm_alive "$1"; }

# The links' receive buffers. Each end of a link is a UDP socket of the
# host that QEMU opens with the host's default receive buffer
# (net.core.rmem_default, 212,992 bytes on Debian): a guest that TCG holds
# up for a moment while its peer sends a burst overflows it, and the host
# drops the datagrams (RcvbufErrors in /proc/net/snmp: 4.4 % of them on
# 2026-11-30, the source of rdma_rxe's sequence errors and go-back-N
# retransmissions in every row), a loss no cable has. QEMU has no option
# for it, so vm_boot raises the default to LAB_LINK_RCVBUF bytes (16 MiB;
# 0 leaves it) while QEMU opens its sockets and sets it back after.
# vm_rcvbuf_raise prints the value to set back ("" when nothing changed)
# and notes the outcome in $LAB_RUN/link-rcvbuf. (LAB_RMEM_FILE: the
# sysctl's file, for lab/test/rows_test.sh.)
LAB_RMEM_FILE=${LAB_RMEM_FILE:-/proc/sys/net/core/rmem_default}
vm_rcvbuf_raise() {
	local f=$LAB_RMEM_FILE want=${LAB_LINK_RCVBUF:-16777216} old
	old=$(cat "$f" 2>/dev/null) || old=""
	if [ "$want" = 0 ] || [ -z "$old" ] || [ "$old" -ge "$want" ]; then
		echo "rcvbuf=${old:-unknown} (left as it was)" >"$LAB_RUN/link-rcvbuf"
		return 0
	fi
	if ! (echo "$want" >"$f") 2>/dev/null; then
		log "boot: cannot raise net.core.rmem_default to $want (the links keep $old-byte buffers and drop bursts)"
		echo "rcvbuf=$old (could not raise it)" >"$LAB_RUN/link-rcvbuf"
		return 0
	fi
	echo "rcvbuf=$want" >"$LAB_RUN/link-rcvbuf"
	echo "$old"
}

vm_rcvbuf_restore() {
	[ -z "$1" ] || echo "$1" >"$LAB_RMEM_FILE" 2>/dev/null ||
		log "boot: could not set net.core.rmem_default back to $1"
}

# vm_boot [GUEST...]: boot the guests and wait until their job agents run.
vm_boot() {
	local g t0 guests=${*:-$LAB_GUESTS} old_rmem
	t0=$(now)
	[[ "${LAB_LINK_RCVBUF:-0}" =~ ^[0-9]+$ ]] || die "LAB_LINK_RCVBUF must be a number of bytes, not '$LAB_LINK_RCVBUF'"
	old_rmem=$(vm_rcvbuf_raise)
	for g in $guests; do
		if vm_ready "$g"; then
			log "boot: $g already running (pid $(cat "$LAB_RUN/$g.pid"))"
			continue
		fi
		vm_start "$g"
	done
	for g in $guests; do
		if ! wait_for "${LAB_BOOT_TIMEOUT:-90}" vm_settled "$g" || ! vm_ready "$g"; then
			vm_rcvbuf_restore "$old_rmem"
			log "boot: $g not ready after $(elapsed "$t0") s (timeout ${LAB_BOOT_TIMEOUT:-90} s); console tail:"
			tr -d '\r' <"$LAB_RUN/$g.console" | tail -15 >&2
			return 1
		fi
		log "boot: $g ready after $(elapsed "$t0") s ($(tr -d '\r' <"$LAB_RUN/$g.console" | grep -a -m1 'link rxe1/1' | sed 's/^.*link //' || echo 'rxe state unknown'))"
	done
	vm_rcvbuf_restore "$old_rmem"
}

# vm_stop [GUEST...]: power off (job), then kill QEMU if it is still there.
vm_stop() {
	local g pid guests=${*:-$LAB_GUESTS}
	for g in $guests; do
		vm_alive "$g" && job_submit "$g" poweroff 10 'sync; busybox poweroff -f' >/dev/null
	done
	for g in $guests; do
		[ -s "$LAB_RUN/$g.pid" ] || continue
		pid=$(cat "$LAB_RUN/$g.pid")
		if ! wait_for 15 eval "! kill -0 $pid 2>/dev/null"; then
			log "stop: $g did not power off; killing QEMU (pid $pid)"
			kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
		fi
		rm -f "$LAB_RUN/$g.pid" "$LAB_RUN/$g.ready"
	done
}

# job_submit GUEST NAME TIMEOUT SCRIPT: queue SCRIPT (bash) in GUEST; prints
# the job's path prefix (add .out / .rc).
job_submit() {
	local g=$1 name=$2 t=$3 script=$4 j
	j=$LAB_RUN/q/$g/$(date +%s%N)-$name
	printf '#timeout=%s\n%s\n' "$t" "$script" >"$j.tmp"
	mv "$j.tmp" "$j.job"
	echo "$j"
}

# job_wait JOB SECONDS: wait for JOB's exit status and return it (124 if the
# job is not done after SECONDS, or 125 if its guest died).
job_wait() {
	local j=$1 g
	g=$(basename "$(dirname "$j")")
	if wait_for "$2" eval "[ -e '$j.rc' ] || ! vm_alive $g"; then
		[ -e "$j.rc" ] && return "$(cat "$j.rc")"
		log "job $(basename "$j"): guest $g died"
		return 125
	fi
	log "job $(basename "$j") in $g: no exit status after $2 s"
	return 124
}

# job_kill JOB: end JOB (SIGTERM to its timeout wrapper, which passes it on).
job_kill() {
	local j=$1 g
	g=$(basename "$(dirname "$j")")
	[ -e "$j.rc" ] && return 0
	wait_for 5 test -s "$j.pid" || return 0
	job_submit "$g" kill 10 "kill -TERM $(cat "$j.pid") 2>/dev/null || true" >/dev/null
	job_wait "$j" 10 || true
}

# gexec GUEST TIMEOUT SCRIPT: run SCRIPT in GUEST, print its output, return its status.
gexec() {
	local j rc=0
	j=$(job_submit "$1" x "$2" "$3")
	job_wait "$j" $(($2 + 10)) || rc=$?
	cat "$j.out" 2>/dev/null || true
	return $rc
}

# monitor GUEST CMD: one QEMU monitor command on GUEST (e.g. "set_link n0 off").
monitor() {
	timeout 10 python3 "$LAB_REPO/lab/monitor.py" "$LAB_RUN/$1.mon" "$2"
}

# monitor_script GUEST SCRIPT: monitor commands and "sleep S" steps,
# separated by ";", on one connection (lab/monitor.py)
monitor_script() {
	timeout 60 python3 "$LAB_REPO/lab/monitor.py" "$LAB_RUN/$1.mon" "$2"
}
