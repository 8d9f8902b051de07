#!/usr/bin/env bash
# The whole test suite: formatting, vet, shellcheck over the tree's shell
# scripts, the tree's Python checked (py_compile; pyflakes when
# installed), the lab's host-side tests, every test (with the race
# detector where goroutines run, shortened), then the seeded fault
# campaigns at full size without it (they start no goroutines; the race
# pass runs them shortened), ibpath sim's random schedules, and layer 1
# on every simulator profile. Extra
# arguments go to every `go test` run (e.g. ./test.sh -run APM).
#
# The report (scripts/testreport): one line per step with its result (ok,
# FAIL, SKIP and why) and duration, a go test run's line with its counts;
# under a failed step, its output (for go test, the failing tests' output
# as plain `go test` shows it); every step runs even when one failed. Then
# every skipped test with its reason (the t.Skip message), every failure,
# and the closing line `N passed, N failed, N skipped`, which counts every
# Go test and subtest result of every go test run (a parent besides its
# subtests, a test run by two steps twice), a package that failed with no
# test failing (a build failure) once, and each other step once. The exit
# status is 1 when anything failed.
set -euo pipefail
cd "$(dirname "$0")"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the Python checks and the lab's tests leave no __pycache__ in the tree
export PYTHONPYCACHEPREFIX=$tmp/pycache
go build -o "$tmp/testreport" ./scripts/testreport || {
	echo "test.sh: cannot build scripts/testreport, which reports the steps" >&2
	exit 2
}
module=$(go list -m)
report() { "$tmp/testreport" "$@"; }

# step NAME CMD...: run CMD (a command or a function of this file), its
# output kept for the report, and record the step.
step() {
	local name=$1 since=$EPOCHREALTIME rc=0
	shift
	"$@" >"$tmp/step.log" 2>&1 || rc=$?
	report step -ledger "$tmp/ledger" -name "$name" -since "$since" -rc "$rc" -log "$tmp/step.log"
}
# skip NAME REASON: record a step that cannot run here.
skip() { report step -ledger "$tmp/ledger" -name "$1" -skip "$2"; }
# gotest NAME ARGS...: go test -json ARGS, recorded with its tests.
gotest() {
	local name=$1 since=$EPOCHREALTIME rc=0
	shift
	go test -json "$@" >"$tmp/go.json" 2>"$tmp/go.err" || rc=$?
	report step -ledger "$tmp/ledger" -name "$name" -since "$since" -rc "$rc" \
		-log "$tmp/go.err" -go-json "$tmp/go.json"
}

gofmt_check() {
	local unformatted
	unformatted=$(find . -name '*.go' -not -path './vendor/*' -print0 | xargs -0r gofmt -l) || return
	[ -z "$unformatted" ] && return
	echo "gofmt would change:"
	echo "$unformatted"
	return 1
}
step gofmt gofmt_check
step "go vet" go vet ./...

shell_scripts=$(report scripts shell)
mapfile -t shell_scripts <<<"$shell_scripts"
if command -v shellcheck >/dev/null; then
	step "shellcheck (${#shell_scripts[@]} scripts)" shellcheck "${shell_scripts[@]}"
else
	skip shellcheck "shellcheck not installed (Debian package shellcheck; .ci/run installs it)"
fi
python_scripts=$(report scripts python)
mapfile -t python_scripts <<<"$python_scripts"
if command -v python3 >/dev/null; then
	step "py_compile (${#python_scripts[@]} Python scripts)" python3 -m py_compile "${python_scripts[@]}"
	if python3 -c 'import pyflakes' 2>/dev/null; then
		step pyflakes python3 -m pyflakes "${python_scripts[@]}"
	else
		skip pyflakes "not installed (optional: Debian package python3-pyflakes)"
	fi
	# the lab report's statistics
	step "lab/report.py doctests" python3 -m doctest lab/report.py
else
	skip "Python checks" "no python3"
	skip "lab/report.py doctests" "no python3"
fi
# the lab's row selection, budget and report of rows not run (no guest
# is booted)
if command -v python3 >/dev/null && command -v bc >/dev/null; then
	step lab/test/rows_test.sh bash lab/test/rows_test.sh
else
	skip lab/test/rows_test.sh "needs python3 and bc"
fi

# The packages that start no goroutines (docs/ARCHITECTURE.md: the
# simulator, the machines, path choice and both layers) have nothing for
# the race detector to find; they run without it, which leaves the lab
# in CI the time. crossnic's Directory is shared by goroutines: its test
# keeps the race detector.
single='github.com/ibpath/ibpath/(verbs/sim|fsm|pathsel|apm|crossnic)$'
packages=$(go list ./...)
mapfile -t racy < <(grep -Ev "$single" <<<"$packages")
gotest "go test -race -short (packages with goroutines)" -race -short -count=1 "$@" "${racy[@]}"
gotest "go test -race -short -run Directory ./crossnic" -race -short -count=1 -run 'Directory' "$@" ./crossnic
gotest "go test -short (the goroutine-free packages)" -short -count=1 "$@" ./verbs/sim ./fsm ./pathsel ./apm ./crossnic
# The campaigns allocate hard and hold little (a world per schedule): an
# eighth of the collections (GOGC=800, under 100 MB a test binary) takes
# 10 to 28 % off their time, which the lab in CI gets (the three steps
# below; docs/PERFORMANCE.md, "The suite's time").
GOGC=800 gotest "go test: crossnic campaigns (10,000 schedules)" -count=1 -run 'Campaign|RandomFaultSchedule' "$@" ./crossnic \
	-args -crossnic.runs 10000 -crossnic.switchruns 10000
# the simulator campaign at 10,000 schedules (profiles mixed by seed)
GOGC=800 gotest "go test: verbs/sim campaign (10,000 schedules)" -count=1 -run 'RandomFaultSchedule' "$@" ./verbs/sim -args -sim.runs 10000
# ibpath sim --random: the shim's runtime (both layers, the Go stand-in of
# the C data path) under 100 drawn schedules of each link layer
GOGC=800 gotest "go test: ibpath sim random schedules (100 a link layer)" -count=1 -run 'RandomSchedulesHold' "$@" ./internal/demo \
	-args -demo.seeds 100
# layer 1 on the simulator's other profiles (its tests default to strict)
for profile in rdmavt mlx5; do
	gotest "go test ./apm -sim.profile $profile" -count=1 "$@" ./apm -args -sim.profile "$profile"
done

report summary -ledger "$tmp/ledger" -module "$module"
