#!/usr/bin/env bash
# Builds libibpath.so with the symbol versions of libibverbs (IBVERBS_1.1)
# on its interposed verbs. cgo refuses a version script in #cgo
# directives, so it goes to the external linker through -extldflags. A plain
# `go build -buildmode=c-shared ./cmd/libibpath` also works: glibc binds an
# application's versioned references to the shim's unversioned
# definitions, but then libibpath.so does not say which version it
# stands in for. The build's version and revision (scripts/version) are
# linked in, for the shim's banner.
# usage: cmd/libibpath/build.sh [output]   (default ./libibpath.so)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-libibpath.so}
stamp=$("$here/../../scripts/version" --ldflags)
CGO_ENABLED=1 go build -buildmode=c-shared \
	-ldflags="$stamp -extldflags=-Wl,--version-script=$here/libibpath.map" -o "$out" "$here"
