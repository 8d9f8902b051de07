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
# The uptime is read with bash's own read: a fork per line costs about half
# a second under TCG, and a chatty program would outrun its stamper.
stamp() {
	stdbuf -oL -eL "$@" 2>&1 | while IFS= read -r l; do
		read -r up _ </proc/uptime
		printf '[%s] %s\n' "$up" "$l"
	done
	return "${PIPESTATUS[0]}"
}

# stuck_dump SECONDS: after SECONDS, for each verbs program of a row still
# running (perftest, ibv_rc_pingpong, mpi_check), where each of its threads
# waits: wchan and kernel stack (the row's stuck-<guest>.out). Prints
# nothing when none is left.
stuck_dump() {
	sleep "$1"
	local p t
	for p in $(pgrep -f 'ib_(write|read|send)_(bw|lat)|ibv_rc_pingpong|mpi_check' || true); do
		[ "$p" = "$$" ] && continue
		echo "STUCK pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-120)"
		for t in /proc/$p/task/*; do
			echo "  task ${t##*/} $(cat "$t/comm" 2>/dev/null) state $(awk '{print $3}' "$t/stat" 2>/dev/null) wchan $(cat "$t/wchan" 2>/dev/null)"
			sed 's/^/    /' "$t/stack" 2>/dev/null | head -12
		done
	done
}
