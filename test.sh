#!/usr/bin/env bash
# The whole test suite: formatting, vet, the lab's host-side tests, every
# test (with the race detector where goroutines run, shortened),
# then the seeded fault campaigns at full size without it (they start no
# goroutines; the race pass runs them shortened), and layer 1 on every
# simulator profile. Extra arguments go to every
# `go test` run (e.g. ./test.sh -run APM).
set -euo pipefail
cd "$(dirname "$0")"

unformatted=$(find . -name '*.go' -not -path './vendor/*' -print0 | xargs -0r gofmt -l)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
# the lab report's statistics (lab/report.py doctests), and the lab's row
# selection, budget and report of rows not run (no guest is booted)
if command -v python3 >/dev/null; then
	python3 -m doctest lab/report.py
else
	echo "SKIP lab/report.py doctests: no python3" >&2
fi
if command -v python3 >/dev/null && command -v bc >/dev/null; then
	bash lab/test/rows_test.sh >/tmp/ibpath-lab-rows-test.log 2>&1 || {
		cat /tmp/ibpath-lab-rows-test.log >&2
		exit 1
	}
else
	echo "SKIP lab/test/rows_test.sh: needs python3 and bc" >&2
fi
# The packages that start no goroutines (docs/ARCHITECTURE.md: the
# simulator, the machines, path choice and both layers) have nothing for
# the race detector to find; they run without it, which leaves the lab
# in CI the time. crossnic's Directory is shared by goroutines: its test
# keeps the race detector.
single='github.com/ibpath/ibpath/(verbs/sim|fsm|pathsel|apm|crossnic)$'
mapfile -t racy < <(go list ./... | grep -Ev "$single")
go test -race -short -count=1 "$@" "${racy[@]}"
go test -race -short -count=1 -run 'Directory' "$@" ./crossnic
go test -short -count=1 "$@" ./verbs/sim ./fsm ./pathsel ./apm ./crossnic
go test -count=1 -run 'Campaign|RandomFaultSchedule' "$@" ./crossnic \
	-args -crossnic.runs 10000 -crossnic.switchruns 10000
# the simulator campaign at 10,000 schedules (profiles mixed by seed)
go test -count=1 -run 'RandomFaultSchedule' "$@" ./verbs/sim -args -sim.runs 10000
# layer 1 on the simulator's other profiles (its tests default to strict)
for profile in rdmavt mlx5; do
	go test -count=1 "$@" ./apm -args -sim.profile "$profile"
done
