# shellcheck shell=bash disable=SC2034 # the variables are read by the files that source this one
# lab/lib/common.sh: paths, logging and waiting helpers shared by the host side
# of the lab. Sourced by lab/run.sh; not meant to be run on its own.

# LAB_WORK is the work dir, outside the repository. The guests mount it at the
# same path over 9p, so every path below means the same thing on both sides.
LAB_WORK=${LAB_WORK:-/tmp/ibpath-lab}
LAB_BUILD=$LAB_WORK/build   # kernel, initramfs, host-built binaries (kept between runs)
LAB_RUN=$LAB_WORK/run       # live state of booted guests: pids, monitor sockets, job queues
LAB_OUT=$LAB_WORK/out       # results of the last `run`: one directory per row, report.*
LAB_ACCEL=${LAB_ACCEL:-tcg} # tcg (default) or kvm
LAB_MEM=${LAB_MEM:-512}     # MB per guest
LAB_DEADLINE=${LAB_DEADLINE:-10800} # seconds: QEMU is killed after this, whatever happens (a full run of 98 rows: 100 to 140 min here)
LAB_GUESTS="g1 g2"

LAB_T0=${LAB_T0:-$(date +%s.%N)}
export LAB_T0

# log MSG: one line on stderr with wall clock time and seconds since start.
log() {
	local now
	now=$(date +%s.%N)
	printf '%s [lab +%6.1fs] %s\n' "$(date +%H:%M:%S)" "$(echo "$now - $LAB_T0" | bc)" "$*" >&2
}
die() { log "ERROR: $*"; exit 1; }

# now: seconds since the epoch, with fractions.
now() { date +%s.%N; }
# elapsed T0: seconds since T0, three decimals.
elapsed() { printf '%.3f' "$(echo "$(now) - $1" | bc)"; }

# sleep_until T: sleep until T (seconds since the epoch); at once if T is past.
sleep_until() {
	local d
	d=$(echo "$1 - $(now)" | bc)
	if [ "$(echo "$d > 0" | bc)" = 1 ]; then sleep "$d"; fi
}

# wait_for TIMEOUT CMD...: run CMD every 0.1 s until it succeeds; 1 after TIMEOUT s.
wait_for() {
	local t=$1 end
	shift
	end=$(echo "$(now) + $t" | bc)
	while ! "$@"; do
		if [ "$(echo "$(now) > $end" | bc)" = 1 ]; then
			return 1
		fi
		sleep 0.1
	done
}
