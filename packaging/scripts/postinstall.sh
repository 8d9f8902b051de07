#!/bin/sh
# After the ibpath package is installed or upgraded (deb: postinst
# configure [OLD-VERSION]; rpm: %post with $1 = 1 on install, 2 or more on
# upgrade). Creates the system group ibpath, the operators the shipped
# configuration names (operator = @ibpath) and the D-Bus policy allows
# to arm and migrate; where systemd runs, has it read the unit and, on an
# upgrade, restarts a running ibpathd.
set -e

upgrade=false
case "${1:-}" in
configure)
	if [ -n "${2:-}" ]; then
		upgrade=true
	fi
	;;
[0-9]*)
	if [ "$1" -ge 2 ]; then
		upgrade=true
	fi
	;;
esac

if ! getent group ibpath >/dev/null; then
	groupadd --system ibpath
fi

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload
	if $upgrade; then
		systemctl try-restart ibpathd.service
	fi
fi
