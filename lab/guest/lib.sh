# shellcheck shell=bash
# lab/guest/lib.sh: helpers for jobs that run inside a lab guest (sourced by
# the agent before each job). LAB_ID, LAB_WORK, LAB_REPO, LAB_BUILD, LAB_RUN
# are set by stage2.sh.

# ts: seconds since boot (the guest's clock; compare only within one guest).
ts() { cut -d' ' -f1 /proc/uptime; }

# port_active DEV: 0 when DEV/1 is ACTIVE.
port_active() { rdma link show "$1/1" 2>/dev/null | grep -q 'state ACTIVE'; }

# wait_active DEV SECONDS: wait for DEV/1 to be ACTIVE; prints the wait in s.
wait_active() {
	local t0 i n
	t0=$(ts)
	n=$(($2 * 10))
	for ((i = 0; i < n; i++)); do
		if port_active "$1"; then
			echo "$1 ACTIVE after $(echo "$(ts) - $t0" | bc) s"
			return 0
		fi
		sleep 0.1
	done
	echo "$1 not ACTIVE after $2 s"
	return 1
}

# stamp CMD...: run CMD with stdout and stderr line-buffered, each line
# prefixed by the guest's uptime, so gaps in a program's output can be timed.
# One awk reads the lines and /proc/uptime (a fork per line costs about half
# a second under TCG); bash's read takes a pipe one byte per system call, 9
# times slower, and a chatty program (a debug log) outran it: the pipe
# filled, mpirun blocked writing its ranks' output and stopped serving
# their finalize until the row's limit. mawk reads a pipe in whole buffers
# unless told -W interactive (lines stamped when the buffer filled).
stamp() {
	local aw=(awk)
	awk -W version 2>/dev/null | grep -q mawk && aw=(awk -W interactive)
	# shellcheck disable=SC2016 # an awk program
	stdbuf -oL -eL "$@" 2>&1 | "${aw[@]}" '{
		getline u < "/proc/uptime"; close("/proc/uptime"); split(u, f, " ")
		printf "[%s] %s\n", f[1], $0; fflush()
	}'
	return "${PIPESTATUS[0]}"
}

# armed_wait SECONDS: wait, at most SECONDS, until ibpathd lists QPs and
# every one of them has its backup connected (layer 2 can fail them over;
# an SRQ's QPs move only all together). Prints "ARMED <seconds waited>
# <QPs>", or "NOT_ARMED <seconds> <connected> <connecting>" and returns 1.
armed_wait() {
	local t0 s yes=0 no=0
	t0=$(ts)
	while :; do
		s=$("$LAB_BUILD/ibpath" --timeout 5s --json status 2>/dev/null || true)
		yes=$(printf '%s\n' "$s" | grep -c '"connected": true' || true)
		no=$(printf '%s\n' "$s" | grep -c '"connected": false' || true)
		if [ "$yes" -gt 0 ] && [ "$no" = 0 ]; then
			echo "ARMED $(echo "$(ts) - $t0" | bc) $yes"
			return 0
		fi
		if [ "$(echo "$(ts) - $t0 > $1" | bc)" = 1 ]; then
			echo "NOT_ARMED $(echo "$(ts) - $t0" | bc) $yes $no"
			return 1
		fi
		sleep 0.5
	done
}

# stuck_dump SECONDS: once the job of a verbs program of a row (perftest,
# ibv_rc_pingpong, ibv_srq_pingpong, ucx_perftest, mpi_check,
# nccl_pattern, rping, ibv.test) has run SECONDS, for each such program:
# where each of its threads waits (wchan and kernel stack), then every
# thread's user stack (gdb, from the host's /usr; at most STUCK_GDB_S s,
# the program's job limit held meanwhile)
# (the row's stuck-<guest>.out); then the guest's QPs as the kernel sees
# them (state, PSNs) and the rxe counters that moved during the row
# (retransmissions, RNR and sequence NAKs, duplicates). A job's age comes
# from the start time of its timeout(1): this job may start seconds after
# the program's in a busy guest, and a dump timed from its own start came
# after the program's limit and found nothing (the rows' stuck dumps came
# back empty). Prints nothing when no program lives that long.
STUCK_PROGS='ib_(write|read|send)_(bw|lat)|ibv_(rc|srq)_pingpong|ucx_perftest|mpi_check|nccl_pattern|rping|ibv\.test'
STUCK_GDB_S=${STUCK_GDB_S:-60}
# The helpers below fork nothing (they set variables): a fork costs up to
# half a second under TCG, and a scan that forked a dozen times per
# process came 15 s late.
# stuck_pids: STUCK_PIDS, the programs of the rows (not the shells that
# run them, which name them too)
stuck_pids() {
	local p c
	STUCK_PIDS=()
	for p in $(pgrep -f "$STUCK_PROGS" || true); do
		[ "$p" = "$$" ] && continue
		read -r c 2>/dev/null <"/proc/$p/comm" || continue
		case $c in bash | sh | timeout | stdbuf) continue ;; esac
		STUCK_PIDS+=("$p")
	done
}
# age_cs PID: AGE, how long PID has run in 1/100 s (empty when it is gone)
age_cs() {
	local st up
	AGE=""
	read -r st 2>/dev/null <"/proc/$1/stat" || return 0
	st=${st##*) }
	read -r up _ </proc/uptime
	# shellcheck disable=SC2086
	set -- $st
	AGE=$((${up/./} - ${20} * 100 / STUCK_HZ))
}
# ending PID: 0 when process PID is gone or ending (a zombie, or being
# reaped). A zombie main thread with other threads left is not: the
# process called exit and one of its threads holds it there (a client of
# pingpong-ev.on.setlink-g1 whose dump came back empty)
ending() {
	local st t n=0
	read -r st 2>/dev/null <"/proc/$1/stat" || return 0
	st=${st##*) }
	case ${st%% *} in
	Z | X | x)
		for t in "/proc/$1/task/"*; do n=$((n + 1)); done
		[ "$n" -le 1 ]
		return
		;;
	esac
	return 1
}
# job_timeout_of PID: TMO, the timeout(1) process of the job PID runs in
# (empty when none)
job_timeout_of() {
	local t=$1 st c
	TMO=""
	while [ "$t" -gt 1 ]; do
		read -r st 2>/dev/null <"/proc/$t/stat" || return 0
		st=${st##*) }
		# shellcheck disable=SC2086
		set -- $st
		t=$2
		read -r c 2>/dev/null <"/proc/$t/comm" || return 0
		[ "$c" = timeout ] && { TMO=$t; return 0; }
	done
}
stuck_dump() {
	local before p t stuck=0 t0 old="" up me
	STUCK_HZ=$(getconf CLK_TCK)
	job_timeout_of $$
	me=$TMO
	before=$(rxe_counters)
	read -r t0 _ </proc/uptime
	# the programs started at most seconds before this job: look only in
	# the last 20 s before their limit, every 2 s
	[ "$1" -gt 20 ] && sleep $(($1 - 20))
	while [ -z "$old" ]; do
		stuck_pids
		[ ${#STUCK_PIDS[@]} -gt 0 ] || return 0
		for p in "${STUCK_PIDS[@]}"; do
			# the job's age: a client job may wait for its server first
			job_timeout_of "$p"
			t=$TMO
			# not this job's own, nor a process of a moment
			[ -n "$t" ] && [ "$t" = "$me" ] && continue
			age_cs "$p"
			{ [ -n "$AGE" ] && [ "$AGE" -ge 200 ]; } || continue
			age_cs "${t:-$p}"
			[ -n "$AGE" ] && [ "$AGE" -ge $(($1 * 100)) ] && old="$old $p"
		done
		[ -n "$old" ] && break
		read -r up _ </proc/uptime
		[ $((${up/./} - ${t0/./})) -gt $((($1 + 30) * 100)) ] && return 0
		sleep 2
	done
	# a program's job limit (its timeout(1)) waits while gdb holds it:
	# gdb takes 10 to 40 s under TCG, more than the program had left
	local frozen=""
	# (the trap runs at the shell's exit too, after this function's
	# local is gone: hence the default)
	trap '[ -z "${frozen:-}" ] || kill -CONT $frozen 2>/dev/null' EXIT
	trap 'exit 143' TERM
	for p in $old; do
		# a program ending now is not stuck, and holding its timeout(1)
		# then would fail it (its alarm fires on the continue)
		ending "$p" && continue
		stuck=1
		job_timeout_of "$p"
		t=$TMO
		[ -n "$t" ] && kill -STOP "$t" 2>/dev/null && frozen="$frozen $t"
		age_cs "$p"
		echo "STUCK pid $p (its job ran $1 s or more, the program $((${AGE:-0} / 100)) s): $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-120)"
		# each task: state, flags (0x4: exiting), wchan, the system
		# call it is in (number first; -1: none, running); read with
		# builtins (a fork per field cost seconds)
		local -a f
		local comm st wch sc line fl
		for t in "/proc/$p/task/"*; do
			comm="" st="" wch="" sc=""
			read -r comm 2>/dev/null <"$t/comm" || true
			read -r st 2>/dev/null <"$t/stat" || true
			read -r wch 2>/dev/null <"$t/wchan" || true
			read -r sc 2>/dev/null <"$t/syscall" || true
			read -r -a f <<<"${st##*) }"
			printf -v fl '%#x' "${f[6]:-0}"
			echo "  task ${t##*/} $comm state ${f[0]:-gone} flags $fl wchan ${wch:-none} syscall ${sc%% *}"
			sed 's/^/    /' "$t/stack" 2>/dev/null | head -12
		done
		while read -r line; do
			case $line in State:* | Threads:* | SigPnd:* | ShdPnd:*) echo "  $line" ;; esac
		done 2>/dev/null <"/proc/$p/status" || true
		if command -v gdb >/dev/null; then
			echo "  user stacks (gdb):"
			# then, in a program under the shim, what its completion
			# channels and express lane hold (lip_debug_state: written
			# to the program's stderr, its client.out or server.out;
			# without the shim gdb finds no such function, said in a
			# line the filter drops)
			timeout "$STUCK_GDB_S" gdb -p "$p" -batch -nx -iex 'set debuginfod enabled off' -ex 'set pagination off' -ex 'thread apply all bt 30' \
				-ex 'call (void)lip_debug_state()' 2>&1 |
				grep -E '^(Thread |#)' | sed 's/^/    /' | head -400
		fi
	done
	if [ $stuck = 1 ]; then
		# while the programs are held: their QPs are still there
		echo "QPS (rdma resource show qp):"
		rdma resource show qp 2>&1 | sed 's/^/  /'
		echo "COUNTERS moved during the row (device counter before after):"
		counters_moved "$before" "$(rxe_counters)" "  "
		# the guest's tasks in D state, with their kernel stacks (sysrq
		# w), and its recent kernel messages but the link speed notices
		# rdma_rxe prints at each port query
		echo w >/proc/sysrq-trigger 2>/dev/null || true
		echo "KERNEL LOG (blocked tasks, then the last messages):"
		dmesg 2>/dev/null | grep -v 'speed is unknown' | tail -120 | sed 's/^/  /'
	fi
	if [ -n "$frozen" ]; then
		# shellcheck disable=SC2086
		kill -CONT $frozen 2>/dev/null
		frozen=""
	fi
}

# counters_moved BEFORE AFTER PREFIX: the counters of AFTER whose value
# differs from BEFORE's, as "PREFIX device/counter before after" (the
# guest has no /dev/fd for process substitution).
counters_moved() {
	printf '%s\n--\n%s\n' "$1" "$2" |
		awk -v p="$3" '$0 == "--" { s = 1; next } !s { a[$1] = $2; next } a[$1] != $2 { print p $1, a[$1] + 0, $2 }'
}

# rxe_counters: "device/counter value" per line, sorted, for every rxe
# device's port 1 hardware counters.
rxe_counters() {
	local d f
	for d in /sys/class/infiniband/*; do
		for f in "$d"/ports/1/hw_counters/*; do
			[ -r "$f" ] && echo "${d##*/}/${f##*/} $(cat "$f")"
		done
	done | sort
}

# qp_watch INTERVAL: every INTERVAL seconds until killed, the guest's uptime,
# its QPs as the kernel sees them (state, PSNs; the shim's and the
# program's) and the rxe counters that moved since the last sample. Run for a
# row when LAB_QP_WATCH is set (the row's qps-<guest>.out): the PSNs of two
# ends that stopped agreeing, and the NAKs and retransmissions between them.
qp_watch() {
	local prev cur tprev tcur
	prev=$(rxe_counters)
	tprev=$(thread_ticks)
	while :; do
		echo "AT $(ts)"
		rdma resource show qp 2>&1 | grep -v ' type GSI\| type SMI' | sed 's/^/  /'
		cur=$(rxe_counters)
		counters_moved "$prev" "$cur" "  moved "
		prev=$cur
		tcur=$(thread_ticks)
		ticks_moved "$tprev" "$tcur"
		tprev=$tcur
		sleep "$1"
	done
}

# thread_ticks: "tid comm ticks" for every thread of the guest, ticks being
# its user plus system CPU time (clock ticks, /proc/PID/task/TID/stat).
thread_ticks() {
	local f
	for f in /proc/[0-9]*/task/[0-9]*/stat; do
		cat "$f" 2>/dev/null
	done | awk '{ c = $0; sub(/^[^(]*\(/, "", c); sub(/\).*$/, "", c); n = split($0, a, ") "); split(a[n], b, " "); gsub(/ /, "_", c); print $1, c, b[12] + b[13] }'
}

# ticks_moved PREV CUR: the eight threads that used the most CPU between two
# thread_ticks samples, "  cpu TID COMM TICKS".
ticks_moved() {
	printf '%s\n--\n%s\n' "$1" "$2" |
		awk '$1 == "--" { cur = 1; next } !cur { t[$1 " " $2] = $3; next } { d = $3 - t[$1 " " $2]; if (d > 0) print "  cpu", $1, $2, d }' |
		sort -k4,4nr | head -8
}

# rxe_debug_on: clear the kernel log and turn on rdma_rxe's debug messages
# (QP state changes, PSNs set, RNR timers, responder errors), except its
# two per-packet state traces; kept off the console. For LAB_RXE_DEBUG.
rxe_debug_on() {
	local c=/sys/kernel/debug/dynamic_debug/control
	[ -e $c ] || mount -t debugfs none /sys/kernel/debug || return 1
	dmesg -n 1
	dmesg -C
	echo 'module rdma_rxe +p' >$c &&
		echo 'file rxe_resp.c line 1293 -p' >$c &&
		echo 'file rxe_comp.c line 593 -p' >$c
}

# rxe_debug_off: turn rdma_rxe's debug messages off again.
rxe_debug_off() { echo 'module rdma_rxe -p' >/sys/kernel/debug/dynamic_debug/control; }

# rxe_holders DEV: the pids that hold DEV open (its uverbs character device).
rxe_holders() {
	local u f
	for u in /sys/class/infiniband_verbs/uverbs*; do
		[ "$(cat "$u/ibdev" 2>/dev/null)" = "$1" ] || continue
		for f in /proc/[0-9]*/fd/*; do
			[ "$(readlink "$f" 2>/dev/null)" = "/dev/infiniband/${u##*/}" ] && echo "${f#/proc/}" | cut -d/ -f1
		done
	done | sort -u
}

# rxe_recreate N: delete rxe<N> and add it again on eth<N>, with the
# guest's ibpathd stopped around it, and wait until it is ACTIVE with its
# IPv4 GID at index 1 (as stage2.sh brings it up). A new device has a new
# GSI QP: the way back for rdma_cm after the kernel's QP1 lost its
# receives (docs/LAB.md, "Known limits"). Refuses while another process
# holds the device (deleting it would block until that process exits).
rxe_recreate() {
	local d=rxe$1 h daemon=no want
	if [ -s /tmp/ibpathd-bg/pid ]; then
		daemon=yes
		bash "$LAB_REPO/lab/guest/daemon.sh" stop || return 1
	fi
	h=$(rxe_holders "$d")
	if [ -n "$h" ]; then
		echo "rxe_recreate: $d is held by pid ${h//$'\n'/ } ($(for p in $h; do tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-40; done)); not deleted"
		return 1
	fi
	rdma link delete "$d" || { echo "rxe_recreate: rdma link delete $d failed"; return 1; }
	rdma link add "$d" type rxe netdev "eth$1" || { echo "rxe_recreate: rdma link add $d failed"; return 1; }
	wait_active "$d" 15 || return 1
	want=0000:0000:0000:0000:0000:ffff:$(printf '%02x%02x:%02x%02x' 10 77 "$1" "${LAB_ID#g}")
	for _ in $(seq 1 50); do
		[ "$(cat "/sys/class/infiniband/$d/ports/1/gids/1" 2>/dev/null)" = "$want" ] && break
		sleep 0.1
	done
	[ "$(cat "/sys/class/infiniband/$d/ports/1/gids/1" 2>/dev/null)" = "$want" ] ||
		{ echo "rxe_recreate: $d GID index 1 is not $want"; return 1; }
	echo "rxe_recreate: $d deleted and added again"
	[ $daemon = no ] || bash "$LAB_REPO/lab/guest/daemon.sh" restart
}
