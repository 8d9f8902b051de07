#!/bin/sh
# After the ibpath package is removed (deb: postrm remove, purge,
# upgrade...; rpm: %postun with $1 = 0 on erase, 1 on upgrade). Where
# systemd runs, it forgets the unit. A purge (deb only: rpm has none)
# also removes ibpathd's store, /var/lib/ibpath, and the group ibpath
# unless a user was put in it.
set -e

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload
fi

if [ "${1:-}" = purge ]; then
	rm -rf /var/lib/ibpath
	if getent group ibpath >/dev/null; then
		members=$(getent group ibpath | cut -d: -f4)
		if [ -n "$members" ]; then
			echo "ibpath: kept the group ibpath: $members in it" >&2
		elif ! groupdel ibpath; then
			echo "ibpath: kept the group ibpath: groupdel failed (a user's primary group?)" >&2
		fi
	fi
fi
