#!/usr/bin/env bash
# lab/test/rows_test.sh: tests of the lab's host-side row selection and
# budget (lab/lib/rows.sh) and of how the report shows rows that did not
# run (lab/report.py). No guest is booted: the guest calls are stubbed.
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
check "LAB_ROWS: sb only when it is set" same "$(rows_plan | awk '$2 == "sb"' | wc -l)" 0
check "LAB_ROWS: sb rows when it names them" same "$(LAB_ROWS='\.sb\.' rows_plan | awk '$2 == "sb"' | wc -l)" \
	"$(grep -c -- '-g[12]$' <<<"$LAB_ROW_LIST")"
check "every row of the full plan has a port of its own" \
	same "$(rows_plan | awk '{print $4}' | sort | uniq -d)" ""

# row_run: the budget and a guest gone, on stubbed guests
build_status() { echo ok; }
job_submit() { echo "job_submit $*" >>"$tmp/jobs"; echo "$tmp/job"; }
vm_alive() { [ "$1" != "${GONE:-}" ]; }
rowmeta() { cat "$LAB_OUT/rows/$1/meta" 2>/dev/null; }
mkdir -p "$LAB_OUT/rows"
ROWS_T0=$(now)

LAB_BUDGET=100 row_run pingpong on setlink-g1 18782
check "a cut row bound over the budget left is not started" grep -qx "status=SKIP" <(rowmeta pingpong.on.setlink-g1)
check "  the reason says so, with the seconds" grep -Eq "^reason=lab budget: (99|100) s left, the row may take 120 s$" <(rowmeta pingpong.on.setlink-g1)
check "  and no job went to a guest" test ! -e "$tmp/jobs"

GONE=g2 LAB_BUDGET=1000 row_run write_bw on none 18710
check "a row that finds a guest gone fails at once" grep -qx "status=FAIL" <(rowmeta write_bw.on.none)
check "  with the guest in the reason" grep -qx "reason=guest g2 is not running" <(rowmeta write_bw.on.none)
check "  and no job went to a guest" test ! -e "$tmp/jobs"

ROWS_T0=$(echo "$(now) - 950" | bc)
LAB_BUDGET=1000 row_run write_bw off none 18708
check "an uncut row's bound is its limit plus 20 s" grep -Eq "^reason=lab budget: (49|50) s left, the row may take 53 s$" <(rowmeta write_bw.off.none)
check "budget_check: unset means no budget" budget_check 100000

# the report: a row not run is listed with its reason; a FAIL fails the run
python3 "$LAB_REPO/lab/report.py" "$LAB_OUT" >"$tmp/report" 2>&1
check "the report fails the run for the must-pass row whose guest was gone" same "$?" 1
check "  naming it" grep -q "^result: FAIL (failed: write_bw.on.none)$" "$tmp/report"
check "  and lists the rows the budget left out" \
	grep -q "^not run, the lab budget (LAB_BUDGET) spent: 2 rows: pingpong.on.setlink-g1, write_bw.off.none$" "$tmp/report"

[ "$fails" = 0 ] || { echo "lab/test/rows_test.sh: $fails failed"; exit 1; }
echo "lab/test/rows_test.sh: all passed"
