#!/usr/bin/env bash
# The whole test suite: formatting, vet, every test with the race detector,
# then the seeded fault campaigns at full size without it (they start no
# goroutines; the race pass runs them shortened). Extra arguments go to both
# `go test` runs (e.g. ./test.sh -run APM).
set -euo pipefail
cd "$(dirname "$0")"

unformatted=$(gofmt -l $(find . -name '*.go' -not -path './vendor/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
go test -race -short -count=1 "$@" ./...
go test -count=1 -run 'Campaign|RandomFaultSchedule' "$@" ./crossnic ./verbs/sim
