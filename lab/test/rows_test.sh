#!/usr/bin/env bash
# lab/test/rows_test.sh: tests of the lab's host-side row selection,
# budget and repairs after a cut (lab/lib/rows.sh) and of how the report
# shows rows that did not run or needed a repair (lab/report.py). No guest is booted: the guest calls are stubbed.
# Run by ./test.sh; exit 0 when every check passed.
set -uo pipefail
LAB_REPO=$(cd "$(dirname "$0")/../.." && pwd)
export LAB_REPO
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LAB_WORK=$tmp/work LAB_T0=0
. "$LAB_REPO/lab/lib/common.sh"
. "$LAB_REPO/lab/lib/rows.sh"
log() { echo "$*" >>"$tmp/log"; }

fails=0
check() { # description, then a command that must succeed
	local d=$1
	shift
	if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
same() { [ "$1" = "$2" ] || { echo "  got:  $(printf %q "$1")"; echo "  want: $(printf %q "$2")"; return 1; }; }

# rows_plan: names run exactly, in their order, with the ports a regexp pick gives
plan=$(LAB_ROW_NAMES='write_lat.on.setlink-g1 pingpong.off.none' rows_plan)
check "LAB_ROW_NAMES: those rows in that order" same "$(awk '{print $1 "." $2 "." $3}' <<<"$plan" | tr '\n' ' ')" "write_lat.on.setlink-g1 pingpong.off.none "
check "a named row keeps the port LAB_ROWS gives it" \
	same "$(awk '{print $4}' <<<"$plan" | head -1)" "$(LAB_ROWS='^write_lat\.on\.setlink-g1$' rows_plan | awk '{print $4}')"
: >"$tmp/log"
LAB_ROW_NAMES='pingpong.on.none pingpong.maybe.none' rows_plan >/dev/null
check "an unknown row name is a usage error (2)" same "$?" 2
check "  and the log names it" grep -q "no row named 'pingpong.maybe.none'" "$tmp/log"
LAB_ROW_NAMES='ibpathd.off.none' rows_plan >/dev/null
check "the ibpathd row has no arm without the shim" same "$?" 2
check "LAB_ROWS: sb only when it is set (but for a drain, a loss, a flap2, a flap3 and a -r3)" same "$(rows_plan | awk '$2 == "sb" {print $1 "." $2 "." $3}' | tr '\n' ' ')" "pingpong-ev.sb.drain-g1 pingpong-ev.sb.flap2-g1 pingpong-ev.sb.loss-g1 pingpong-ev.sb.flap3-g1 nccl-r3.sb.setlink-g1 "
check "a loss runs only with the shim, in a full run too" same "$(rows_plan | awk '$3 ~ /^loss-/ {print $1 "." $2 "." $3}' | tr '\n' ' ')" \
	"pingpong-ev.on.loss-g1 pingpong-ev.sb.loss-g1 "
check "a -r3 program runs in the sb arm alone" same "$(rows_plan | awk '$1 == "nccl-r3" {print $2}' | tr '\n' ' ')" "sb "
LAB_ROW_NAMES='nccl-r3.on.setlink-g1' rows_plan >/dev/null
check "  and names no other" same "$?" 2
check "a flap2 cut runs in the sb arm alone" same "$(rows_plan | awk '$3 == "flap2-g1" {print $2}' | tr '\n' ' ')" "sb "
LAB_ROW_NAMES='pingpong-ev.on.flap2-g1' rows_plan >/dev/null
check "  and names no other" same "$?" 2
check "a drain runs only with the shim" same "$(rows_plan | awk '$3 ~ /^drain-/ {print $1 "." $2 "." $3}' | tr '\n' ' ')" \
	"pingpong-ev.on.drain-g1 pingpong-ev.sb.drain-g1 "
LAB_ROW_NAMES='pingpong-ev.off.drain-g1' rows_plan >/dev/null
check "LAB_ROW_NAMES: a drain without the shim is refused" same $? 2
check "LAB_ROWS: sb rows when it names them" same "$(LAB_ROWS='\.sb\.' rows_plan | awk '$2 == "sb"' | wc -l)" \
	"$(grep -c -- '-g[12]$' <<<"$LAB_ROW_LIST")"
check "every row of the full plan has a port of its own" \
	same "$(rows_plan | awk '{print $4}' | sort | uniq -d)" ""
# the programs that receive through a shared receive queue, uncut and
# under cuts, without and with the shim
check "the SRQ programs' rows" \
	same "$(rows_plan | awk '$1 ~ /^(srq_pingpong|ucx_put_bw|mpi-ucx)$/ {print $1 "." $2 "." $3}' | tr '\n' ' ')" \
	"srq_pingpong.off.none srq_pingpong.on.none ucx_put_bw.off.none ucx_put_bw.on.none mpi-ucx.off.none mpi-ucx.on.none srq_pingpong.off.setlink-g1 srq_pingpong.on.setlink-g1 srq_pingpong.off.ipdown-g2 srq_pingpong.on.ipdown-g2 ucx_put_bw.off.ipdown-g1 ucx_put_bw.on.ipdown-g1 mpi-ucx.off.ipdown-g2 mpi-ucx.on.ipdown-g2 "
# lab/run.sh runs under set -e: prog_cmds must succeed for every row of
# the plan (a branch ending on a false test stopped the run at the row)
bad=""
while read -r prog _ cut port; do
	(set -e; prog_cmds "$prog" "$port" "$cut" >/dev/null) || bad="$bad $prog.$cut"
done < <(rows_plan)
check "prog_cmds succeeds for every row of the plan" same "$bad" ""
prog_cmds srq_pingpong 18900 setlink-g1
check "a cut row of ibv_srq_pingpong runs LAB_CUT_SRQ_ITERS exchanges" \
	same "$CLIENT" "stamp ibv_srq_pingpong -d rxe0 -g 1 -c -n $LAB_CUT_SRQ_ITERS -p 18900 10.77.1.2"
check "  waits for every backup to be connected before the cut, has 120 s, its server 15 s more" same "$ARMWAIT $LIMIT $CUT_CAP $SGRACE" "30 120 120 15"
prog_cmds srq_pingpong 18900 none
check "an uncut row waits for no backup" same "$ARMWAIT" ""
prog_cmds nccl 18900 setlink-g1
check "a cut row of the nccl program waits 20 s for its backups" same "$ARMWAIT" "20"
prog_cmds nccl-r3 18900 setlink-g1
check "  nccl-r3's too" same "$ARMWAIT" "20"
nccl_secs() { # PROG CUT: the traffic's seconds the nccl program is given
	LAB_BW_SECONDS=20 prog_cmds "$1" 18900 "$2"
	sed -n 's/.* -D \([0-9]*\).*/\1/p' <<<"$CLIENT"
}
check "  the nccl cut rows run 40 s longer than the uncut, for the armed wait and the cut" \
	same "$(nccl_secs nccl none) $(nccl_secs nccl ipdown-g2) $(nccl_secs nccl-r3 setlink-g1)" "20 60 60"
prog_cmds write_bw 18900 setlink-g2
check "a perftest cut row does not wait (its marker comes after the connect)" same "$ARMWAIT" ""
prog_cmds ucx_put_bw 18900 none
ucx_gid() { [[ "$SERVER" == "export UCX_IB_GID_INDEX=1"* && "$CLIENT" == "export UCX_IB_GID_INDEX=1"* && "$CLIENT" == *" -p 18900 10.77.1.2" ]]; }
check "ucx_perftest names the IPv4 GID index on both sides" ucx_gid
dw=$(
	d=$tmp/dw
	mkdir -p "$d"
	echo "STUCK pid 1" >"$d/a.out" # a dump under way
	echo "STUCK pid 2" >"$d/b.out" # one done
	echo 0 >"$d/b.rc"
	: >"$d/c.out" # a dump job that found nothing
	job_wait() { echo "waited ${1##*/} $2" >>"$d/log"; }
	dumps_wait "$d/a" "$d/b" "$d/c"
	echo "rc $?"
	dumps_wait "$d/b" "$d/c"
	echo "rc $?"
	cat "$d/log"
)
check "dumps_wait waits for the dumps under way alone, and says whether there was one" \
	same "$(tr '\n' ' ' <<<"$dw")" "rc 0 rc 1 waited a 75 "
prog_cmds pingpong-ev 18900 loss-g1
check "a loss row's 16,000 event-driven exchanges get 360 s" same "$LIMIT $CUT_CAP" "360 360"
stopcut=$(
	ROW_DIR=$tmp/stoprow
	mkdir -p "$ROW_DIR"
	gexec() { # GUEST TIMEOUT CMD: the guest's answer
		echo "$1 $3" >>"$ROW_DIR/cmds"
		case $3 in *"pkill -STOP"*) printf 'CUT_NS 1\nSTOPPED 1\n' ;; *) echo "RESTORE_NS 2" ;; esac
	}
	cut_apply stop-g1 off >/dev/null && cut_apply stop-g1 on >/dev/null
	cat "$ROW_DIR/meta"
	grep -c "^g1 .*pkill -STOP -e -x ibv_rc_pingpong" "$ROW_DIR/cmds"
	grep -c "^g1 pkill -CONT -x ibv_rc_pingpong" "$ROW_DIR/cmds"
)
check "a stop cut stops the program in its guest, then continues it, and says how many it stopped" \
	same "$(tr '\n' ' ' <<<"$stopcut")" "stopped=1 1 1 "

# row_run: the budget and a guest gone, on stubbed guests
build_status() { echo ok; }
job_submit() { echo "job_submit $*" >>"$tmp/jobs"; : >"$tmp/job.run"; echo "$tmp/job"; }
sleep() { :; } # the rows' pauses for guests that are not there
vm_alive() { [ "$1" != "${GONE:-}" ]; }
rowmeta() { cat "$LAB_OUT/rows/$1/meta" 2>/dev/null; }
mkdir -p "$LAB_OUT/rows"
ROWS_T0=$(now)

LAB_BUDGET=100 row_run pingpong on setlink-g1 18782
check "a cut row bound over the budget left is not started" grep -qx "status=SKIP" <(rowmeta pingpong.on.setlink-g1)
check "  the reason says so, with the seconds" grep -Eq "^reason=lab budget: (99|100) s left, the row may take 120 s$" <(rowmeta pingpong.on.setlink-g1)
check "  and no job went to a guest" test ! -e "$tmp/jobs"

LAB_BUDGET=100 row_run mpi-verbs on ipdown-g1 18886
check "an ip-down row's bound adds its rdma_cm check and repair" \
	grep -Eq "^reason=lab budget: (99|100) s left, the row may take 180 s$" <(rowmeta mpi-verbs.on.ipdown-g1)
rm -rf "$LAB_OUT/rows/mpi-verbs.on.ipdown-g1"

GONE=g2 LAB_BUDGET=1000 row_run write_bw on none 18710
check "a row that finds a guest gone fails at once" grep -qx "status=FAIL" <(rowmeta write_bw.on.none)
check "  with the guest in the reason" grep -qx "reason=guest g2 is not running" <(rowmeta write_bw.on.none)
check "  and no job went to a guest" test ! -e "$tmp/jobs"

ROWS_T0=$(echo "$(now) - 950" | bc)
LAB_BUDGET=1000 row_run write_bw off none 18708
check "an uncut row's bound is its limit plus 20 s" grep -Eq "^reason=lab budget: (49|50) s left, the row may take 53 s$" <(rowmeta write_bw.off.none)
check "budget_check: unset means no budget" budget_check 100000

# a flap3 row: its three pulls within 10 s, one script on one monitor
# connection, so no read of a guest's clock (seconds each under TCG) and
# no monitor command of its own between them
(
	monitor() { echo "monitor $2" >>"$tmp/flap3"; }
	monitor_script() { echo "script $2" >>"$tmp/flap3"; }
	gexec() { echo "gexec $1" >>"$tmp/flap3"; }
	wait_for() { return 0; }
	job_wait() { return 0; }
	row_run pingpong-ev sb flap3-g1 18900 >"$tmp/flap3.out" 2>&1
)
pulls() { # the guest commands from the pulls on: the script first
	sed -n '/^script /,$p' "$tmp/flap3" | head -2 | tr '\n' '|'
}
check "a flap3 row's three pulls are one monitor script, one after another" \
	same "$(pulls)" "script set_link n0 off; sleep 1; set_link n0 on; sleep 1.5; set_link n0 off; sleep 1; set_link n0 on; sleep 1.5; set_link n0 off; sleep 1; set_link n0 on|gexec g1|"
check "  and the guests' clocks are read after the third" grep -qx "restore_ns_g1=" <(rowmeta pingpong-ev.sb.flap3-g1)
rm -rf "$LAB_OUT/rows/pingpong-ev.sb.flap3-g1" "$tmp/jobs"

# a setlink cut holds LAB_CUT_FOR s from the cut command's return: the
# guests' clocks are read by jobs that run meanwhile, not waited for
# inside the cut (each read takes seconds into a busy TCG guest)
(
	seq=$tmp/cutseq
	cut_apply() { echo "cut_apply $1 $2" >>"$seq"; }
	job_submit() { mkdir -p "$tmp/cj"; echo "129.5 $1" >"$tmp/cj/$2-$1.out"; echo "job_submit $1 $2" >>"$seq"; echo "$tmp/cj/$2-$1"; }
	job_wait() { echo "job_wait $(basename "$1")" >>"$seq"; return 0; }
	gexec() { echo "gexec $1" >>"$seq"; }
	wait_for() { return 0; }
	now() { echo 1000.5; }
	sleep_until() { echo "sleep_until $1" >>"$seq"; }
	LAB_CUT_FOR=2 row_run write_lat on setlink-g1 18901 >/dev/null 2>&1
)
held() { # the guest steps between the cut and the restore
	sed -n '/^cut_apply setlink-g1 off/,/^cut_apply setlink-g1 on/p' "$tmp/cutseq" | sed '1d;$d' | tr '\n' '|'
}
check "a cut holds its time: the guests' clocks are jobs, not waits, until the restore" \
	same "$(held)" "job_submit g1 write_lat.on.setlink-g1-cutclock|job_submit g2 write_lat.on.setlink-g1-cutclock|sleep_until 1002.5|"
check "  their answers land in the meta after it" same "$(rowmeta write_lat.on.setlink-g1 | grep -E '^cut_(uptime_g[12]|held)=' | tr '\n' ' ')" \
	"cut_held=0.000 cut_uptime_g1=129.5 g1 cut_uptime_g2=129.5 g2 "
rm -rf "$LAB_OUT/rows/write_lat.on.setlink-g1" "$tmp/jobs"

# a server that outlives its client's success under the shim is dumped
# before it is killed (a teardown that hangs); without the shim, or after
# a client that failed, it is killed as it is
sdump() { # SHIM CLIENT_RC: the row's guest jobs, by name
	(
		jd=$tmp/sd
		rm -rf "$jd" "$LAB_OUT/rows/send_bw.$1.none"
		mkdir -p "$jd"
		SH=$1
		job_submit() { echo "${2#send_bw."$SH".none-}" >>"$jd/names"; : >"$jd/$2.run"; echo "$jd/$2"; }
		job_wait() {
			case $1 in
			*-client) return "$CRC" ;;
			*-server) return 124 ;;
			*-sdump) echo "STUCK pid 9" >"$1.out"; return 0 ;;
			*) return 0 ;;
			esac
		}
		job_kill() { echo "kill ${1##*-}" >>"$jd/names"; }
		dumps_wait() { return 1; }
		wait_for() { return 0; }
		gexec() { :; }
		ROWS_T0=$(now) CRC=$2 LAB_BUDGET=1000 row_run send_bw "$1" none 18711 >/dev/null 2>&1
		grep -v "^\(stuck\|kill stuck\)$" "$jd/names" | tr '\n' ' '
		test -s "$LAB_OUT/rows/send_bw.$1.none/stuck-server.out" && echo copied
	)
}
check "a server outliving a client that passed, under the shim: dumped, then killed" \
	same "$(sdump on 0)" "server client sdump kill server copied"
check "  not without the shim" same "$(sdump off 0)" "server client kill server "
check "  nor after a client that failed" same "$(sdump on 1)" "server client kill server "
rm -rf "$LAB_OUT/rows/send_bw."*.none "$tmp/jobs"

# the switch back: the arm sb names it, the arm on has the shim's default
# (on) unless LAB_SHIM_ENV turns it off; a shim row's meta says which
# (switchback=on|off), and the control arm runs without the shim
sbarm() { LAB_SHIM_ENV=${2:-} shim_switchback "$1"; } # ARM [LAB_SHIM_ENV]
check "shim_switchback: sb switches back, on by default does not (the shim's default)" same "$(sbarm sb) $(sbarm on)" "on off"
check "  on does when LAB_SHIM_ENV turns it on" same "$(sbarm on IBPATH_SWITCHBACK=on) $(sbarm on IBPATH_SWITCHBACK=1)" "on on"
check "  on does not when LAB_SHIM_ENV turns it off (any case, quoted, among others)" \
	same "$(sbarm on 'IBPATH_EXPRESS=off IBPATH_SWITCHBACK=off') $(sbarm on IBPATH_SWITCHBACK=OFF) $(sbarm on "IBPATH_SWITCHBACK='0'") $(sbarm on 'IBPATH_SWITCHBACK="false"')" \
	"off off off off"
check "  LAB_SHIM_ENV's last setting counts, an empty one is the default, other variables do not count" \
	same "$(sbarm on 'IBPATH_SWITCHBACK=off IBPATH_SWITCHBACK=on') $(sbarm on IBPATH_SWITCHBACK=) $(sbarm on IBPATH_SWITCHBACK_DAMPING=on)" "on off off"
check "  a value the shim refuses (it disables itself) is off" same "$(sbarm on IBPATH_SWITCHBACK=maybe)" off
check "  sb switches back whatever LAB_SHIM_ENV says" same "$(sbarm sb IBPATH_SWITCHBACK=off)" on
rowenv() { # ARM [LAB_SHIM_ENV]: "the client's environment line|the meta's switchback line"
	(
		d=$tmp/re
		rm -rf "$d" "$LAB_OUT/rows/read_bw.$1.none"
		mkdir -p "$d"
		job_submit() { [[ "$2" != *-client ]] || head -1 <<<"$4" >"$d/env"; : >"$d/$2.run"; echo "$d/$2"; }
		job_wait() { return 0; }
		job_kill() { :; }
		dumps_wait() { return 1; }
		wait_for() { return 0; }
		gexec() { :; }
		ROWS_T0=$(now) LAB_SHIM_ENV=${2:-} LAB_BUDGET=1000 row_run read_bw "$1" none 18712 >/dev/null 2>&1
		echo "$(cat "$d/env")|$(grep '^switchback=' "$LAB_OUT/rows/read_bw.$1.none/meta")"
		rm -rf "$d" "$LAB_OUT/rows/read_bw.$1.none"
	)
}
# shellcheck disable=SC2016 # ($LAB_BUILD as the guest's shell gets it)
pre='export LD_PRELOAD=$LAB_BUILD/libibpath.so IBPATH_LOG=info'
check "a row of the arm on: the shim's defaults, meta switchback=off" same "$(rowenv on)" "$pre |switchback=off"
check "  switchback=on when LAB_SHIM_ENV turns it on" \
	same "$(rowenv on 'IBPATH_EXPRESS=off IBPATH_SWITCHBACK=on')" "$pre IBPATH_EXPRESS=off IBPATH_SWITCHBACK=on|switchback=on"
check "  the arm sb: IBPATH_SWITCHBACK=on after LAB_SHIM_ENV, meta switchback=on" \
	same "$(rowenv sb IBPATH_SWITCHBACK=off)" "$pre IBPATH_SWITCHBACK=off IBPATH_SWITCHBACK=on|switchback=on"
check "  the arms off and ctl: no shim, no switchback in the meta" same "$(rowenv off)/$(rowenv ctl)" "|/|"

unset -f sleep # sleep_until's own pause, for real
t=$(command date +%s.%N)
sleep_until "$(echo "$t + 0.3" | bc)"
check "sleep_until: waits until its time" test "$(echo "$(command date +%s.%N) - $t >= 0.3" | bc)" = 1
t=$(command date +%s.%N)
sleep_until "$(echo "$t - 5" | bc)"
check "  and returns at once for a time past (not 5 s later)" test "$(echo "$(command date +%s.%N) - $t < 2" | bc)" = 1
sleep() { :; }

# row_cm: after an ip-down cut, a broken rdma_cm is repaired by re-creating
# rxe0 in the cut guest, and checked again; stubbed guests give the
# results of the rping clients (CM_RESULTS, in order) and of rxe_recreate
gexec() { # GUEST TIMEOUT CMD
	echo "gexec $1 $3" >>"$tmp/gexec"
	case $3 in
	"command -v rping") return 0 ;;
	"rxe_recreate 0") return "${RECREATE_RC:-0}" ;;
	*rping\ -c*)
		local r=${CM_RESULTS%% *}
		CM_RESULTS=${CM_RESULTS#* }
		return "$r"
		;;
	esac
}
job_wait() { return 0; }
job_kill() { :; }
cmrow() { # NAME: run row_cm for ipdown-g1 in a fresh row dir
	ROW_DIR=$LAB_OUT/rows/$1
	mkdir -p "$ROW_DIR"
	: >"$tmp/gexec"
	row_cm "$1" g1 18900
}
CM_RESULTS="0 " cmrow cm-ok
check "rdma_cm that works after the cut: ok, nothing re-created" \
	bash -c "grep -qx 'cm_after_cut=ok' '$LAB_OUT/rows/cm-ok/meta' && ! grep -q rxe_recreate '$tmp/gexec'"
check "  the rping server runs in the cut guest, the client in the other" \
	bash -c "grep -q 'rping -s -a 10.77.0.1' '$tmp/jobs' && grep -q '^gexec g2 timeout 20 rping -c -a 10.77.0.1' '$tmp/gexec'"
CM_RESULTS="1 0 " cmrow cm-fixed
check "broken rdma_cm: rxe0 re-created in the cut guest, then checked again" \
	same "$(grep -c . "$tmp/gexec") $(sed -n 3p "$tmp/gexec")" "4 gexec g1 rxe_recreate 0"
check "  the meta says broken, and that the repair worked" \
	same "$(grep '^cm_' "$LAB_OUT/rows/cm-fixed/meta" | tr '\n' ' ')" "cm_fix=rxe0 re-created in g1: ok cm_after_cut=broken "
CM_RESULTS="1 1 " cmrow cm-still
check "a repair after which rdma_cm still fails says so" \
	grep -qx "cm_fix=rxe0 re-created in g1: still broken" "$LAB_OUT/rows/cm-still/meta"
RECREATE_RC=1 CM_RESULTS="1 " cmrow cm-norecreate
check "a failed re-creation is not checked again, and says so" \
	bash -c "grep -qx 'cm_fix=rxe0 re-created in g1: still broken' '$LAB_OUT/rows/cm-norecreate/meta' && [ \$(grep -c 'rping -c' '$tmp/gexec') = 1 ]"
rm -rf "$LAB_OUT"/rows/cm-*

# row_link: after a failed recovery, links A and B's IP both ways; a guest
# whose link carries nothing gets both guests rebooted (stubbed:
# LINK_RESULTS are the pings' results in order, link A's g1 and g2, then
# link B's, before and after a reboot)
gexec() { # GUEST TIMEOUT CMD
	echo "gexec $1 $3" >>"$tmp/gexec"
	case $3 in
	busybox\ ping*)
		local r=${LINK_RESULTS%% *}
		LINK_RESULTS=${LINK_RESULTS#* }
		return "$r"
		;;
	esac
}
vm_stop() { echo vm_stop >>"$tmp/vm"; }
vm_boot() { echo "vm_boot deadline $LAB_DEADLINE" >>"$tmp/vm"; return "${BOOT_RC:-0}"; }
mkdir -p "$LAB_RUN"
: >"$LAB_RUN/g1.pid" # the guests started just now
linkrow() { # NAME: a cut row whose recovery failed, then row_link
	ROW_DIR=$LAB_OUT/rows/$1
	mkdir -p "$ROW_DIR"
	printf '%s\n' "name=$1" prog=pingpong shim=off cut=setlink-g1 rep=1 recovered=no >"$ROW_DIR/meta"
	: >"$tmp/gexec"
	: >"$tmp/vm"
	row_link "$1"
}
check "links_suspect: a failed recovery" links_suspect no 0
check "links_suspect: a client that ran out its time, no cut" links_suspect "" 124
check "links_suspect: a client that could not connect" links_suspect "" 1
unsuspect() { ! links_suspect yes 0 && ! links_suspect "" 0; }
check "links_suspect: not a recovered row whose client ended well" unsuspect
LAB_DEADLINE=3000 LINK_RESULTS="0 0 0 0 " linkrow link-ok
check "links A and B that carry IP both ways: ok, no reboot" \
	bash -c "grep -qx 'links=ok' '$LAB_OUT/rows/link-ok/meta' && [ ! -s '$tmp/vm' ]"
check "  one ping from each guest to the other over each link" \
	same "$(cut -d' ' -f2- "$tmp/gexec" | tr '\n' ';')" "g1 busybox ping -c 2 -W 2 10.77.0.2;g2 busybox ping -c 2 -W 2 10.77.0.1;g1 busybox ping -c 2 -W 2 10.77.1.2;g2 busybox ping -c 2 -W 2 10.77.1.1;"
: >"$LAB_RUN/g1.pid"
LAB_DEADLINE=3000 LINK_RESULTS="1 0 0 0 0 0 0 0 " linkrow link-fixed
check "a guest whose link A is dead: both guests rebooted, the links checked again" \
	same "$(grep -E '^link(s|_fix)=' "$LAB_OUT/rows/link-fixed/meta" | tr '\n' ';')" "links=dead: A from g1;link_fix=guests rebooted: ok;"
check "  the new guests get what is left of QEMU's deadline" \
	grep -Eq "^vm_boot deadline (299[0-9]|3000)$" "$tmp/vm"
LAB_DEADLINE=3000 LINK_RESULTS="0 0 0 1 0 0 0 0 " linkrow link-b
check "a guest whose link B is dead (link A fine): both guests rebooted" \
	same "$(grep -E '^link(s|_fix)=' "$LAB_OUT/rows/link-b/meta" | tr '\n' ';')" "links=dead: B from g2;link_fix=guests rebooted: ok;"
LAB_DEADLINE=3000 LINK_RESULTS="0 1 0 0 0 0 1 0 " linkrow link-still
check "a reboot after which a link is still dead says so" \
	grep -qx "link_fix=guests rebooted: still dead" "$LAB_OUT/rows/link-still/meta"
LAB_DEADLINE=3000 BOOT_RC=1 LINK_RESULTS="1 1 0 0 " linkrow link-noboot
check "guests that do not boot again: still dead, the links not pinged again" \
	bash -c "grep -qx 'link_fix=guests rebooted: still dead' '$LAB_OUT/rows/link-noboot/meta' && [ \$(grep -c ping '$tmp/gexec') = 4 ]"
: >"$LAB_RUN/g1.pid" # started just now again: the steps above take seconds on a busy host
LAB_DEADLINE=100 LINK_RESULTS="1 1 0 0 " linkrow link-late
check "no reboot with under 2 minutes of QEMU's deadline left" \
	bash -c "grep -Eq '^link_fix=not rebooted: (9[0-9]|100) s of QEMU.s deadline left$' '$LAB_OUT/rows/link-late/meta' && [ ! -s '$tmp/vm' ]"
python3 "$LAB_REPO/lab/report.py" "$LAB_OUT" >"$tmp/report" 2>&1
check "the report lists the rows after which a link was dead, with the repair" \
	grep -q "^recov #: a link carried no IP after the row .*link-fixed (dead: A from g1; guests rebooted: ok), link-b (dead: B from g2; guests rebooted: ok)" "$tmp/report"
rm -rf "$LAB_OUT"/rows/link-*

# the report: a row not run is listed with its reason; a FAIL fails the run
python3 "$LAB_REPO/lab/report.py" "$LAB_OUT" >"$tmp/report" 2>&1
check "the report fails the run for the must-pass row whose guest was gone" same "$?" 1
check "  naming it" grep -q "^result: FAIL (failed: write_bw.on.none)$" "$tmp/report"
check "  and lists the rows the budget left out" \
	grep -q "^not run, the lab budget (LAB_BUDGET) spent: 2 rows: pingpong.on.setlink-g1, write_bw.off.none$" "$tmp/report"

# row_again: a must-pass row under which the links failed and the reboot
# brought them back runs once more (row_run stubbed: AGAIN_STATUS is the
# retry's status, FAIL or SKIP)
rm -rf "$LAB_OUT/rows"
stub_row_run() { # PROG SHIM CUT PORT REP
	echo "row_run $*" >>"$tmp/runs"
	ROW_DIR=$LAB_OUT/rows/$1.$2.$3.again
	mkdir -p "$ROW_DIR"
	printf '%s\n' "name=$1.$2.$3.again" "prog=$1" "shim=$2" "cut=$3" rep=1 "status=$AGAIN_STATUS" reason=stub >"$ROW_DIR/meta"
}
# (through eval: shellcheck would take this definition for the one the
# tests above call)
eval 'row_run() { stub_row_run "$@"; }'
againrow() { # PROG SHIM CUT LINK_FIX: a first run that failed with LINK_FIX, then row_again
	ROW_DIR=$LAB_OUT/rows/$1.$2.$3
	mkdir -p "$ROW_DIR"
	printf '%s\n' "name=$1.$2.$3" "prog=$1" "shim=$2" "cut=$3" rep=1 status=FAIL reason=first "links=dead: B from g2" "link_fix=$4" >"$ROW_DIR/meta"
	: >"$tmp/runs"
	row_again "$1" "$2" "$3" 18700
}
AGAIN_STATUS=FAIL againrow write_lat on setlink-g1 "guests rebooted: ok"
check "a shim cut row whose links the reboot brought back runs again, as REP again" \
	same "$(cat "$tmp/runs")" "row_run write_lat on setlink-g1 18700 again"
check "  the first run's meta names its retry" grep -qx "again=write_lat.on.setlink-g1.again" "$LAB_OUT/rows/write_lat.on.setlink-g1/meta"
AGAIN_STATUS=FAIL againrow pingpong off setlink-g1 "guests rebooted: ok"
check "a cut row without the shim (not must-pass) does not" test ! -s "$tmp/runs"
AGAIN_STATUS=FAIL againrow pingpong on none "guests rebooted: still dead"
check "nor a row whose links stayed dead" test ! -s "$tmp/runs"
AGAIN_STATUS=SKIP againrow write_bw off none "guests rebooted: ok"
check "a retry the budget left out is not named in the first run's meta" \
	bash -c "! grep -q '^again=' '$LAB_OUT/rows/write_bw.off.none/meta'"
check "  which says why it did not run" grep -qx "again_skipped=stub" "$LAB_OUT/rows/write_bw.off.none/meta"
python3 "$LAB_REPO/lab/report.py" "$LAB_OUT" >"$tmp/report" 2>&1
judged() { # the failed list names the retry, and not the first run
	local f
	f=$(sed -n 's/^result: FAIL (failed: \(.*\))$/\1/p' "$tmp/report" | tr -d ' ' | tr ',' '\n' | sort | tr '\n' ' ')
	same "$f" "pingpong.on.none write_lat.on.setlink-g1.again "
}
check "the report judges the retry in place of the first run" judged
check "  and lists the retried row with both statuses" \
	grep -q "^run again after the guests' reboot .*: write_lat.on.setlink-g1 (FAIL; retry FAIL)$" "$tmp/report"
check "  and the row whose retry did not fit as not judged, with the reason" \
	grep -q "^not judged, .*: write_bw.off.none (FAIL; retry not run: stub)$" "$tmp/report"

# a cut row whose cut came after the program's last line: MISS, not
# PASS (it tested no fault), and not a failure of the run
(
	out=$tmp/missout
	for st in 150.0 90.0; do
		d=$out/rows/pingpong.on.setlink-g1-$st
		mkdir -p "$d"
		printf '%s\n' name=pingpong.on.setlink-g1 prog=pingpong shim=on cut=setlink-g1 rep=1 client_rc=0 server_rc=0 "cut_uptime_g1=$st" >"$d/meta"
		printf '%s\n' '[99.5] 8192000 bytes in 1.00 seconds = 65.54 Mbit/sec' '[100.0] 1000 iters in 1.00 seconds = 1000.00 usec/iter' >"$d/client.out"
	done
	python3 "$LAB_REPO/lab/report.py" "$out" >"$tmp/missreport" 2>&1
	echo "rc=$?" >>"$tmp/missreport"
	python3 -c 'import json, sys; print(" ".join("%s:%s" % (r["name"], r["status"]) for r in sorted(json.load(open(sys.argv[1]))["rows"], key=lambda r: r["name"])))' "$out/report.json" >"$tmp/missrows"
)
check "a cut row whose cut came after the program ended is MISS, not PASS" \
	same "$(cat "$tmp/missrows")" "pingpong.on.setlink-g1-150.0:MISS pingpong.on.setlink-g1-90.0:PASS"
check "  listed as such, and the run is not failed for it" \
	bash -c "grep -q '^cut missed (MISS), .*: 1 rows: pingpong.on.setlink-g1-150.0\$' '$tmp/missreport' && grep -qx 'rc=0' '$tmp/missreport'"

# the verdicts that want the QPs home read the row's meta (switchback):
# a drain row of the arm on whose QPs did not come home fails when its
# shim switched back and passes when it did not; a row without the key
# (an older run's) wants them home only in the arm sb
(
	out=$tmp/sbout
	for k in on off none; do
		d=$out/rows/pingpong-ev.on.drain-g1-$k
		mkdir -p "$d"
		printf '%s\n' name=pingpong-ev.on.drain-g1 prog=pingpong-ev shim=on cut=drain-g1 rep=1 client_rc=0 server_rc=0 drain_rc=0 undrain_rc=0 >"$d/meta"
		[ "$k" = none ] || echo "switchback=$k" >>"$d/meta"
		printf '%s\n' '[50.0] time=2026-11-28T11:46:05.015Z level=INFO msg="libibpath: first good completion on the backup" qpn=17 since_fault=3ms at_unix_ns=1795866365014876395' \
			'[99.5] 8192000 bytes in 1.00 seconds = 65.54 Mbit/sec' '[100.0] 1000 iters in 1.00 seconds = 1000.00 usec/iter' >"$d/client.out"
	done
	python3 "$LAB_REPO/lab/report.py" "$out" >/dev/null 2>&1
	python3 -c 'import json, sys; print(" ".join("%s:%s:%s:%s" % (r["name"], r.get("switchback"), r["status"], r["detail"]) for r in sorted(json.load(open(sys.argv[1]))["rows"], key=lambda r: r["name"])))' "$out/report.json" >"$tmp/sbrows"
)
check "a drain row of the arm on with its QPs not home: FAIL when its shim switched back, else PASS" \
	same "$(cat "$tmp/sbrows")" "pingpong-ev.on.drain-g1-none:None:PASS: pingpong-ev.on.drain-g1-off:off:PASS: pingpong-ev.on.drain-g1-on:on:FAIL:no QP came home after the undrain"

# the links' receive buffers (lab/lib/vm.sh): raised while QEMU opens its
# sockets, set back after, the outcome noted for the report's env
rcvbuf() { # SYSCTL_VALUE LAB_LINK_RCVBUF: prints "printed|file after|note|file restored"
	(
		. "$LAB_REPO/lab/lib/vm.sh"
		mkdir -p "$LAB_RUN"
		LAB_RMEM_FILE=$tmp/rmem
		[ -n "$1" ] && echo "$1" >"$tmp/rmem"
		[ -n "$1" ] || rm -f "$tmp/rmem"
		local old
		old=$(LAB_LINK_RCVBUF=$2 vm_rcvbuf_raise)
		local now
		now=$(cat "$tmp/rmem" 2>/dev/null)
		vm_rcvbuf_restore "$old"
		echo "$old|$now|$(cat "$LAB_RUN/link-rcvbuf")|$(cat "$tmp/rmem" 2>/dev/null)"
	)
}
check "the links' receive buffer default is raised to 16 MiB and set back" \
	same "$(rcvbuf 212992 "")" "212992|16777216|rcvbuf=16777216|212992"
check "  to LAB_LINK_RCVBUF when it is set" same "$(rcvbuf 212992 4194304)" "212992|4194304|rcvbuf=4194304|212992"
check "  left alone when it is already that large" same "$(rcvbuf 33554432 "")" "|33554432|rcvbuf=33554432 (left as it was)|33554432"
check "  or LAB_LINK_RCVBUF is 0" same "$(rcvbuf 212992 0)" "|212992|rcvbuf=212992 (left as it was)|212992"
check "  or the sysctl cannot be read" same "$(rcvbuf "" "")" "||rcvbuf=unknown (left as it was)|"

# the guests' QEMU sessions get the autogroup nice LAB_QEMU_NICE
qnice() { # AUTOGROUP_FILE_CONTENT ("" for none, "ro" for unwritable) LAB_QEMU_NICE: prints "file|note"
	(
		. "$LAB_REPO/lab/lib/vm.sh"
		mkdir -p "$LAB_RUN" "$tmp/ag/77"
		rm -f "$tmp/ag/77/autogroup"
		case $1 in
		"") ;;
		ro) mkdir -p "$tmp/ag/77/autogroup" ;; # a directory: the write fails
		*) echo "$1" >"$tmp/ag/77/autogroup" ;;
		esac
		log() { :; }
		LAB_AUTOGROUP_DIR=$tmp/ag LAB_QEMU_NICE=$2 vm_priority 77 g1
		echo "$(cat "$tmp/ag/77/autogroup" 2>/dev/null)|$(cat "$LAB_RUN/qemu-nice")"
		rm -rf "$tmp/ag"
	)
}
check "the guests' QEMU sessions get autogroup nice LAB_QEMU_NICE" same "$(qnice "/autogroup-5 nice 0" -10)" "-10|qemu_nice=-10 (autogroup)"
check "  left alone with LAB_QEMU_NICE empty" same "$(qnice "x" "")" "x|qemu_nice=left (LAB_QEMU_NICE empty)"
check "  or without autogroup scheduling" same "$(qnice "" -10)" "|qemu_nice=left (no autogroup scheduling here)"
check "  or when the write fails" same "$(qnice ro -10)" "|qemu_nice=left (could not write $tmp/ag/77/autogroup)"
vm_default_nice() { (unset LAB_QEMU_NICE; . "$LAB_REPO/lab/lib/vm.sh"; echo "$LAB_QEMU_NICE"); }
check "  none by default" same "$(vm_default_nice)" ""

# NCCL's default ACK timeout for the nccl program; -r3 has 15
prog_cmds nccl 18900 none
no_timeout() { [[ "$CLIENT" != *NCCL_IB_TIMEOUT* ]]; }
check "the nccl program runs with NCCL's default timeout" no_timeout
prog_cmds nccl-r3 18900 setlink-g1
r3_env() { [[ "$CLIENT" == *"env NCCL_IB_RETRY_CNT=3 NCCL_IB_TIMEOUT=15 "* ]]; }
check "  nccl-r3 with retry_cnt 3 and timeout 15" r3_env
prog_cmds write_bw-bi 18900 setlink-g1
bi_timeout() { [[ "$CLIENT" == *"ib_write_bw "*" -b -u 18 "* && "$SERVER" == *" -b -u 18 "* ]]; }
check "  write_bw-bi at ACK timeout 18 on both ends" bi_timeout
uncut_timeout() { # PROG: the uncut row's ends at ACK timeout 18, the cut row's at perftest's
	prog_cmds "$1" 18900 none
	[[ "$CLIENT" == *"ib_"*" -u 18 "* && "$SERVER" == *" -u 18 "* ]] || return 1
	prog_cmds "$1" 18900 setlink-g2
	[[ "$CLIENT" != *" -u "* && "$SERVER" != *" -u "* ]]
}
uncut_timeouts() { local p; for p in write_bw send_bw read_bw send_bw-ev; do uncut_timeout "$p" || { echo "  $p"; return 1; }; done; }
check "the uncut bandwidth rows at ACK timeout 18, their cut rows at perftest's 14" uncut_timeouts
prog_cmds write_bw-q4 18900 setlink-g1
q4_timeout() { [[ "$CLIENT" == *"ib_write_bw "*" -q 4 -u 18 "* && "$SERVER" == *" -q 4 -u 18 "* ]]; }
check "  write_bw-q4 too" q4_timeout

# lab/pcap.py on a capture written here: a write, its ACK, a NAK invalid
# request, an RNR NAK, a retransmission like its first packet and one
# unlike it (rdma_rxe's zero-length resend of a WRITE), and a QP whose
# PSNs start anew
python3 - "$tmp/t.pcap" <<'PY'
import struct, sys
def frame(src, dst, bth, ext=b"", payload=b""):
    roce = bth + ext + payload + b"\0" * 4
    udp = struct.pack("!HHHH", 49152, 4791, 8 + len(roce), 0) + roce
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, bytes(src), bytes(dst))
    return b"\x52\x54\0\0\x02\0" + b"\x52\x54\0\0\x01\0" + b"\x08\x00" + ip + udp
def bth(op, dqp, psn, a=0):
    return struct.pack("!BBHI I", op, 0, 0xFFFF, dqp, (a << 31) | psn)
g1, g2 = [10, 77, 0, 1], [10, 77, 0, 2]
reth = struct.pack("!QII", 0x1000, 0x55, 8)
frames = [
    frame(g1, g2, bth(0x0A, 0x12, 100, 1), reth, b"x" * 8),
    frame(g2, g1, bth(0x11, 0x11, 100), struct.pack("!I", (0x1F << 24) | 1)),
    frame(g1, g2, bth(0x0A, 0x12, 101, 1), reth, b"x" * 8),
    frame(g1, g2, bth(0x0A, 0x12, 101, 1), reth, b"x" * 8),
    frame(g2, g1, bth(0x11, 0x11, 101), struct.pack("!I", (0x61 << 24) | 2)),
    frame(g2, g1, bth(0x11, 0x11, 102), struct.pack("!I", (0x2E << 24) | 2)),
    frame(g1, g2, bth(0x0A, 0x12, 100, 1), struct.pack("!QII", 0x1000, 0x55, 0)),
    # QP 0x13 reset with fresh PSNs between its two packets at PSN 7: not
    # a retransmission unlike its first
    frame(g1, g2, bth(0x0A, 0x13, 7, 1), reth, b"x" * 8),
    frame(g1, g2, bth(0x04, 0x13, 5000000, 1), b"", b"y" * 8),
    frame(g1, g2, bth(0x04, 0x13, 7, 1), b"", b"y" * 8),
]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for i, fr in enumerate(frames):
        f.write(struct.pack("<IIII", 1796000000, i * 1000, len(fr), len(fr)) + fr)
PY
python3 "$LAB_REPO/lab/pcap.py" --around 8 "$tmp/t.pcap" >"$tmp/pcap.out" 2>&1
check "lab/pcap.py counts the packets per QP and the retransmission" \
	grep -q "^to 10.77.0.2 qp 0x000012: WRITE_ONLY 4; retransmitted 2$" "$tmp/pcap.out"
check "  the retransmissions unlike their first packet, alone" grep -q "^retransmissions unlike their first packet: 1$" "$tmp/pcap.out"
check "  each shown with its first packet" grep -q "^  then .*psn=100 *pay=0 A va=0x1000 rkey=0x55 len=0$" "$tmp/pcap.out"
check "  names the NAKs" grep -q "NAK invalid request msn=2" "$tmp/pcap.out"
check "  and the RNR NAKs" grep -q "RNR NAK timer=14 msn=2" "$tmp/pcap.out"
check "  shows what came before an invalid request" grep -q "^   >> .*NAK invalid request" "$tmp/pcap.out"
check "  the payload and RETH of a write" grep -q "WRITE_ONLY .*psn=100 *pay=8 A va=0x1000 rkey=0x55 len=8" "$tmp/pcap.out"
# lab/monitor.py with a script: its commands on one connection, in order,
# its sleeps between them; a bad step refused before anything is sent
python3 - "$tmp/mon.sock" "$tmp/mon.log" <<'PY' &
import socket, sys, time
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1])
srv.listen(4)
srv.settimeout(20)
with open(sys.argv[2], "w") as log:
    for n in range(2):
        c, _addr = srv.accept()
        c.sendall(b"QEMU monitor\r\n(qemu) ")
        t0, buf = time.time(), b""
        while True:
            d = c.recv(4096)
            if not d:
                break
            buf += d
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                log.write("conn %d %.1f %s\n" % (n, time.time() - t0, line.decode()))
                log.flush()
                c.sendall(line + b"\r\n" + (b"Error: no such link\r\n" if b"bogus" in line else b"") + b"(qemu) ")
        c.close()
PY
mon_pid=$!
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -S "$tmp/mon.sock" ] && break; sleep 0.2; done
python3 "$LAB_REPO/lab/monitor.py" "$tmp/mon.sock" "sleep x" >/dev/null 2>"$tmp/mon.err"
check "lab/monitor.py refuses a bad sleep step" same "$?:$(cat "$tmp/mon.err")" "1:monitor.py: bad step 'sleep x' (want sleep SECONDS)"
python3 "$LAB_REPO/lab/monitor.py" "$tmp/mon.sock" "set_link n0 off; sleep 0.5; set_link n0 on"
mon_rc=$?
python3 "$LAB_REPO/lab/monitor.py" "$tmp/mon.sock" "bogus" >/dev/null
bogus_rc=$?
wait "$mon_pid"
check "  sends a script's commands on one connection, in order" \
	same "$(awk '{print $1, $2, $4, $5, $6}' "$tmp/mon.log" | head -2 | tr '\n' '|')" "conn 0 set_link n0 off|conn 0 set_link n0 on|"
# shellcheck disable=SC2016 # (an awk program)
check "  with its sleeps between them" awk 'NR == 2 && $3 >= 0.5 {ok = 1} END {exit !ok}' "$tmp/mon.log"
check "  and says 0 when QEMU took them, 1 on an error reply" same "$mon_rc $bogus_rc" "0 1"
printf 'junk' >"$tmp/bad.pcap"
python3 "$LAB_REPO/lab/pcap.py" "$tmp/bad.pcap" >/dev/null 2>"$tmp/pcap.err"
check "  and refuses what is not a capture" same "$?:$(cat "$tmp/pcap.err")" "2:pcap.py: $tmp/bad.pcap: not a pcap file (4 bytes)"

# stuck_dump (lab/guest/lib.sh), on this host: a program of the rows run
# under its job's timeout(1) (4 s) is dumped once the job is 2 s old. The
# stand-in gdb takes 3 s and prints a stack only if the program is still
# there then, past its limit: the timeout waits for the dump, and ends the
# program after it
mkdir -p "$tmp/sd/bin"
cp "$(type -P sleep)" "$tmp/sd/nccl_pattern"
cat >"$tmp/sd/bin/gdb" <<'GDB'
#!/bin/sh
sleep 3
kill -0 "$2" 2>/dev/null && printf 'Thread 1 (LWP %s) "nccl_pattern":\n#0  lip_poll_cq () at hotpath.c:1\n' "$2"
GDB
chmod +x "$tmp/sd/bin/gdb"
timeout 4 "$tmp/sd/nccl_pattern" 30 &
sd_job=$!
sleep 0.3
(
	# shellcheck source=lab/guest/lib.sh
	. "$LAB_REPO/lab/guest/lib.sh"
	rxe_counters() { :; }
	rdma() { :; }
	PATH=$tmp/sd/bin:$PATH stuck_dump 2 >"$tmp/sd/out" 2>&1
)
wait "$sd_job"
sd_rc=$?
check "stuck_dump: a program past its job's age is dumped" grep -Eq "^STUCK pid [0-9]+ \(its job ran 2 s or more, the program [0-9]+ s\): $tmp/sd/nccl_pattern 30" "$tmp/sd/out"
check "  with every thread's user stack, its job's limit held meanwhile" grep -q "^    #0  lip_poll_cq () at hotpath.c:1" "$tmp/sd/out"
check "  and the program ended by that limit after the dump (124)" same "$sd_rc" 124
(
	. "$LAB_REPO/lab/guest/lib.sh"
	rxe_counters() { :; }
	stuck_dump 1 >"$tmp/sd/none" 2>&1
)
check "  and nothing is said when no program is left" same "$(cat "$tmp/sd/none")" ""
# ending: a zombie (a child not reaped yet) or a process gone is ending,
# a running one is not
command sleep 30 &
sd_live=$!
sh -c 'exit 0' &
sd_zombie=$!
command sleep 0.5
sd_ending=$(
	. "$LAB_REPO/lab/guest/lib.sh"
	for p in "$sd_live" "$sd_zombie" 999999999; do
		if ending "$p"; then echo "$p ending"; else echo "$p live"; fi
	done
)
kill "$sd_live"
wait "$sd_live" "$sd_zombie" 2>/dev/null
check "stuck_dump leaves alone a program that is ending (a zombie, or gone)" \
	same "$(tr '\n' ' ' <<<"$sd_ending")" "$sd_live live $sd_zombie ending 999999999 ending "
# but a process whose main thread exited while another thread lives on
# (stuck in its exit) is dumped
printf '#include <pthread.h>\n#include <unistd.h>\nstatic void *nap(void *a) { sleep(30); return a; }\nint main(void) { pthread_t t; pthread_create(&t, 0, nap, 0); pthread_exit(0); }\n' >"$tmp/sd/zleader.c"
if gcc -o "$tmp/sd/zleader" "$tmp/sd/zleader.c" -lpthread 2>/dev/null; then
	"$tmp/sd/zleader" &
	sd_zl=$!
	command sleep 0.5
	sd_zl_ending=$(
		. "$LAB_REPO/lab/guest/lib.sh"
		if ending "$sd_zl"; then echo ending; else echo live; fi
	)
	kill "$sd_zl"
	wait "$sd_zl" 2>/dev/null
	check "  but not a process whose main thread exited and another lives on" same "$sd_zl_ending" live
else
	echo "skip   a process held in its exit: no gcc"
fi
# a program of the rows that ended but is not reaped yet (its parent
# never waits) is not dumped
(
	"$tmp/sd/nccl_pattern" 0 &
	exec "$(type -P sleep)" 8
) &
sd_parent=$!
command sleep 2.5
(
	. "$LAB_REPO/lab/guest/lib.sh"
	rxe_counters() { :; }
	PATH=$tmp/sd/bin:$PATH stuck_dump 1 >"$tmp/sd/zombie" 2>&1
)
kill "$sd_parent"
wait "$sd_parent" 2>/dev/null
check "  nor one that ended and waits to be reaped" same "$(cat "$tmp/sd/zombie")" ""

[ "$fails" = 0 ] || { echo "lab/test/rows_test.sh: $fails failed"; exit 1; }
echo "lab/test/rows_test.sh: all passed"
