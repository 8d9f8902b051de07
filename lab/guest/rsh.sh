#!/bin/bash
# lab/guest/rsh.sh: a remote-shell replacement for MPI launchers in the lab
# (the guests have no ssh). Called as ssh would be: rsh.sh [ssh options] HOST CMD...
# HOST is a lab address (10.77.x.N) or a guest name (gN); CMD runs in that
# guest as a job of its agent (lab/guest/agent.sh) through the shared work
# dir. Its output is printed when it ends; the exit status is CMD's.
set -euo pipefail
while [ $# -gt 0 ]; do
	case $1 in
	-x | -T | -n | -q) shift ;;
	-o | -p | -l) shift 2 ;;
	*) break ;;
	esac
done
[ $# -ge 2 ] || { echo "usage: rsh.sh HOST CMD..." >&2; exit 2; }
host=$1
shift
case $host in
10.77.*.*) g=g${host##*.} ;;
g[0-9]) g=$host ;;
*) echo "rsh.sh: unknown lab host $host" >&2; exit 2 ;;
esac
q=$LAB_RUN/q/$g
[ -d "$q" ] || { echo "rsh.sh: no agent queue for $g" >&2; exit 2; }
j=$q/$(date +%s%N)-rsh-$LAB_ID
# like ssh: the words are joined by spaces and run by the remote shell
printf '#timeout=%s\ncd /root\n%s\n' "${RSH_TIMEOUT:-120}" "$*" >"$j.tmp"
mv "$j.tmp" "$j.job"
end=$(($(date +%s) + ${RSH_TIMEOUT:-120} + 10))
while [ ! -e "$j.rc" ]; do
	[ "$(date +%s)" -lt $end ] || { echo "rsh.sh: no exit status from $g" >&2; exit 255; }
	sleep 0.1
done
cat "$j.out"
exit "$(cat "$j.rc")"
