#!/usr/bin/env bash
# The whole test suite: formatting, vet, then every test with the race
# detector. Extra arguments go to `go test` (e.g. ./test.sh -run APM).
set -euo pipefail
cd "$(dirname "$0")"

unformatted=$(gofmt -l $(find . -name '*.go' -not -path './vendor/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
go test -race -count=1 "$@" ./...
