#!/usr/bin/env bash
# Builds libibpath.so, the front (C only: see front.c), with the symbol
# versions of ../libibpath.map on its exported verbs. It needs libibverbs
# (DT_NEEDED: a program's dlopen of libibverbs gets the front's handle,
# and lookups on it must find libibverbs's other verbs) and is never
# unloaded (-z nodelete: the core it loads is not either).
# usage: cmd/libibpath/front/build.sh OUTPUT [VERSION]
#   CC (default cc) and CFLAGS are the compiler and its extra flags.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: $0 OUTPUT [VERSION]}
version=${2:-dev}
case $version in
*[!0-9A-Za-z.+-]*) echo "$0: version \"$version\": want a semantic version" >&2; exit 2 ;;
esac
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# shellcheck disable=SC2086 # CFLAGS is a list of flags
"${CC:-cc}" -shared -fPIC -O2 -g -Wall -Wextra -fvisibility=hidden -pthread ${CFLAGS:-} \
	-DLIPF_VERSION="\"$version\"" -o "$tmp" \
	"$here/front.c" "$here/dlopen.c" "$here/signals.c" "$here/stubs.c" \
	-Wl,--version-script="$here/../libibpath.map" -Wl,-z,nodelete -Wl,-z,now \
	-ldl -Wl,--no-as-needed -libverbs -Wl,--as-needed
mv -f "$tmp" "$out"
