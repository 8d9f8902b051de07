#!/bin/bash
# lab/guest/daemon.sh start|stop|restart: the ibpathd every shim row of the lab
# attaches to (the shim's default socket, /run/ibpath/ibpathd.sock). It
# runs on the guest's real rxe devices and replicates with the other
# guest's over link B (gossip port 7950, cluster key), so the shim's
# backup QPs on rxe1 get connected and a cut of link A fails over onto
# them. Its log is $LAB_RUN/ibpathd-bg-$LAB_ID.log. It polls ports every
# second and runs anti-entropy every 10 s: each guest has one TCG vCPU,
# which the programs measured share with it (the shim learns of port
# events from its own context, not from ibpathd). LAB_DAEMON_ARGS adds
# flags (e.g. --pprof-addr 127.0.0.1:6060 to profile it). stop waits
# until it has exited (its devices closed); restart appends to the log.
set -uo pipefail
W=/tmp/ibpathd-bg
pidf=$W/pid
log=$LAB_RUN/ibpathd-bg-$LAB_ID.log
stop() {
	local p
	[ -s "$pidf" ] || return 0
	p=$(cat "$pidf")
	kill "$p" 2>/dev/null
	for _ in $(seq 1 100); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$p" 2>/dev/null; then
		echo "ibpathd (pid $p) still running 10 s after SIGTERM in $LAB_ID"
		return 1
	fi
	rm -f "$pidf"
}
case ${1:-} in
restart)
	stop || exit 1
	echo "--- restarted $(date +%T)" >>"$log"
	;&
start)
	[ "$1" = start ] && : >"$log"
	mkdir -p "$W" /run/ibpath
	printf '%s\n' 8899aabbccddeeff00112233445566778899aabbccddeeff0011223344556677 >"$W/key"
	chmod 600 "$W/key"
	n=${LAB_ID#g}
	other=$((3 - n))
	read -ra extra <<<"${LAB_DAEMON_ARGS:-}" # its flags, split on blanks
	setsid "$LAB_BUILD/ibpathd" --fabric hardware --node "$LAB_ID" --state-dir "$W/state" \
		--gossip-bind "10.77.1.$n:7950" --join "10.77.1.$other:7950" --cluster-key-file "$W/key" --dbus off \
		--port-poll 1s --anti-entropy 10s --config /dev/null "${extra[@]}" </dev/null >>"$log" 2>&1 &
	echo $! >"$pidf"
	# by the clock: under a slow TCG host one `ibpath status` takes a
	# second, and ibpathd 20 s to join its peer and serve
	until="$((SECONDS + 30))"
	while [ "$SECONDS" -lt "$until" ]; do
		"$LAB_BUILD/ibpath" status >/dev/null 2>&1 && { echo "ibpathd up in $LAB_ID"; exit 0; }
		sleep 0.1
	done
	echo "ibpathd did not serve within 30 s in $LAB_ID:"
	cat "$log"
	exit 1
	;;
stop)
	stop || exit 1
	echo "ibpathd stopped in $LAB_ID"
	;;
*)
	echo "usage: daemon.sh start|stop|restart" >&2
	exit 2
	;;
esac
