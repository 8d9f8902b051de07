#!/bin/bash
# lab/guest/agent.sh: the job agent of a lab guest. The guests have no ssh;
# the host (and the other guest, for MPI) runs commands here by dropping a
# bash script into the shared work dir:
#
#   $LAB_RUN/q/<guest>/<name>.job   written atomically (write .tmp, then mv)
#                                   first line may be "#timeout=SECONDS" (default 60)
#   <name>.run    the agent has claimed the job and started it
#   <name>.out    its stdout and stderr
#   <name>.pid    pid of its timeout(1) wrapper: kill -TERM ends the whole job
#   <name>.rc     its exit status (written last, atomically); 124 = timed out
#
# Jobs run concurrently, each under timeout(1), with lab/guest/lib.sh sourced.
set -uo pipefail
Q=$LAB_RUN/q/$LAB_ID
mkdir -p "$Q"
cut -d' ' -f1 /proc/uptime >"$LAB_RUN/$LAB_ID.ready.tmp"
mv "$LAB_RUN/$LAB_ID.ready.tmp" "$LAB_RUN/$LAB_ID.ready"
echo "[$LAB_ID] AGENT_READY"

run_job() {
	local j=$1 t=60 rc
	read -r first <"$j.run" || true
	case $first in "#timeout="*) t=${first#\#timeout=} ;; esac
	# shellcheck disable=SC2016 # the job's bash expands these, not this one
	timeout -k 3 "$t" bash -c 'source "$LAB_REPO/lab/guest/lib.sh"; source "$1"' job "$j.run" >"$j.out" 2>&1 </dev/null &
	echo $! >"$j.pid"
	wait $!
	rc=$?
	echo $rc >"$j.rc.tmp"
	mv "$j.rc.tmp" "$j.rc"
}

while :; do
	for f in "$Q"/*.job; do
		[ -e "$f" ] || continue
		j=${f%.job}
		mv "$f" "$j.run" 2>/dev/null || continue
		run_job "$j" &
	done
	sleep 0.1
done
