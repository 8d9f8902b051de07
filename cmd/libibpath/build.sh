#!/usr/bin/env bash
# Builds the shim: libibpath.so, the front a program preloads (C only,
# front/), and libibpath-core.so next to it, the shim itself (Go and C),
# which the front loads unless IBPATH_DISABLE=1. Both carry the symbol
# versions of libibverbs (IBVERBS_1.1) on their interposed verbs:
# libibpath.map, which cgo refuses in #cgo directives, so it goes to the
# external linker through -extldflags. The build's version and revision
# (scripts/version) are linked in, for the banners. On machines the front
# is not built for (other than amd64 and arm64), the core alone is
# libibpath.so, and IBPATH_DISABLE=1 still loads the Go runtime.
# usage: cmd/libibpath/build.sh [output]   (default ./libibpath.so; the
#        core goes to libibpath-core.so in the same directory)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-libibpath.so}
core="$(dirname "$out")/libibpath-core.so"
stamp=$("$here/../../scripts/version" --ldflags)
version=$("$here/../../scripts/version")
CGO_ENABLED=1 go build -buildmode=c-shared \
	-ldflags="$stamp -extldflags=-Wl,--version-script=$here/libibpath.map" -o "$core" "$here"
rm -f "${core%.so}.h" # cgo's header: nothing includes it
case $(go env GOARCH) in
amd64 | arm64) "$here/front/build.sh" "$out" "$version" ;;
*) mv -f "$core" "$out" ;;
esac
