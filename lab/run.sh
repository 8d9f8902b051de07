#!/usr/bin/env bash
# lab/run.sh: the ibpath soft-RoCE lab. Two QEMU guests (stock Debian kernel,
# rdma_rxe), each with two rxe devices on two point-to-point links, run real
# verbs programs with and without the ibpath shim, with cable cuts mid-run.
# See docs/LAB.md.
#
# usage: lab/run.sh setup    install packages, extract the kernel, build the
#                            initramfs, the shim, the verbs lab tests, the MPI check
#        lab/run.sh probe    can this machine boot a lab guest? (boots g1, stops it)
#        lab/run.sh boot     boot g1 and g2 and leave them running
#        lab/run.sh run      run the rows on the running guests (boots them if needed),
#                            write $LAB_WORK/out/report.{json,tsv} and print the table
#        lab/run.sh stop     power the guests off
#        lab/run.sh all      setup, boot, run, stop
#        lab/run.sh clean    stop the guests and remove $LAB_WORK
# env:   LAB_WORK (default /tmp/ibpath-lab), LAB_ACCEL=tcg|kvm, LAB_ROWS (regexp
#        over row names, default all), LAB_ROW_NAMES (row names, run exactly
#        those in that order), LAB_BUDGET (s for the rows: a row that might not
#        end within it is not started), LAB_DEADLINE (s, QEMU killed after it)
# exit:  0 when every must-pass row passed (see docs/LAB.md), 1 otherwise,
#        2 on usage errors, 3 when the guests cannot boot.
set -euo pipefail
LAB_REPO=$(cd "$(dirname "$0")/.." && pwd)
export LAB_REPO
. "$LAB_REPO/lab/lib/common.sh"
. "$LAB_REPO/lab/lib/setup.sh"
. "$LAB_REPO/lab/lib/vm.sh"
. "$LAB_REPO/lab/lib/rows.sh"

cmd_setup() {
	mkdir -p "$LAB_BUILD"
	setup_packages || die "setup: package installation failed"
	setup_kernel || die "setup: no kernel"
	setup_initramfs
	setup_builds
}

cmd_probe() {
	if ! [ -s "$LAB_BUILD/vmlinux" ] || ! [ -s "$LAB_BUILD/initramfs.gz" ]; then
		log "probe: not set up"
		return 3
	fi
	mkdir -p "$LAB_RUN"
	local was_up=0
	vm_ready g1 && was_up=1
	if LAB_BOOT_TIMEOUT=${LAB_BOOT_TIMEOUT:-60} vm_boot g1; then
		log "probe: g1 boots ($LAB_ACCEL), rxe devices up"
		[ $was_up = 1 ] || vm_stop g1
		return 0
	fi
	vm_stop g1
	return 3
}

cmd_boot() {
	mkdir -p "$LAB_RUN"
	vm_boot || { vm_stop; return 3; }
}

cmd_run() {
	mkdir -p "$LAB_RUN"
	if ! vm_ready g1 || ! vm_ready g2; then
		cmd_boot || return 3
	fi
	rows_run
}

cmd_stop() { mkdir -p "$LAB_RUN"; vm_stop; }

cmd_all() {
	cmd_setup
	cmd_boot || return 3
	trap 'vm_stop' EXIT
	trap 'log "interrupted"; exit 130' INT TERM
	local rc=0
	rows_run || rc=$?
	vm_stop
	trap - EXIT INT TERM
	return $rc
}

case "${1:-}" in
setup) cmd_setup ;;
probe) cmd_probe ;;
boot) cmd_boot ;;
run) cmd_run ;;
stop) cmd_stop ;;
all) cmd_all ;;
clean)
	[ -d "$LAB_RUN" ] && vm_stop
	rm -rf "$LAB_WORK"
	log "clean: removed $LAB_WORK"
	;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
	;;
esac
