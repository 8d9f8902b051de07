#!/bin/sh
# Before the ibpath package is removed (deb: prerm remove; rpm: %preun
# with $1 = 0 on erase; nothing on an upgrade): where systemd runs,
# ibpathd is stopped and its unit disabled.
set -e

case "${1:-}" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now ibpathd.service ||
			echo "ibpath: could not stop and disable ibpathd.service; stop it by hand" >&2
	fi
	;;
esac
