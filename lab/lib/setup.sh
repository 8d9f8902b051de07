# shellcheck shell=bash
# lab/lib/setup.sh: everything done on the host before a guest boots.
#   setup_packages  apt-get what the lab needs (only when something is missing)
#   setup_kernel    extract the Debian kernel linux-image-amd64 depends on, uncompressed
#   setup_initramfs busybox + the modules rxe needs + lab/initramfs/init
#   setup_builds    the shim, the verbs lab tests, ibpathd and ibpath, and the MPI check program
# Sourced by lab/run.sh after lib/common.sh.

LAB_PACKAGES=(qemu-system-x86 qemu-system-data rdma-core ibverbs-utils ibverbs-providers
	libibverbs-dev perftest busybox-static cpio kmod xz-utils gcc libc6-dev iproute2
	python3 bc coreutils openmpi-bin libopenmpi-dev rdmacm-utils ucx-utils)

setup_packages() {
	local missing=() p
	for p in "${LAB_PACKAGES[@]}"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		log "packages: all present"
		return 0
	fi
	log "packages: installing ${missing[*]}"
	timeout 600 apt-get update -qq || return 1
	DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >"$LAB_BUILD/apt.log" 2>&1 || { tail -20 "$LAB_BUILD/apt.log" >&2; return 1; }
}

# The kernel is extracted, never installed: the host keeps its own kernel.
setup_kernel() {
	local kpkg kv
	kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
	[ -n "$kpkg" ] || { log "kernel: apt-cache knows no linux-image-amd64"; return 1; }
	kv=${kpkg#linux-image-}
	if [ ! -d "$LAB_BUILD/kroot/lib/modules/$kv" ]; then
		log "kernel: downloading $kpkg"
		rm -f "$LAB_BUILD"/linux-image-*.deb
		(cd "$LAB_BUILD" && timeout 600 apt-get download "$kpkg" >/dev/null 2>&1) ||
			{ log "kernel: apt-get download $kpkg failed"; return 1; }
		rm -rf "$LAB_BUILD/kroot" "$LAB_BUILD/vmlinux"
		dpkg-deb -x "$LAB_BUILD/${kpkg}"_*.deb "$LAB_BUILD/kroot"
		depmod -b "$LAB_BUILD/kroot" "$kv"
	fi
	echo "$kv" >"$LAB_BUILD/kver"
	# QEMU boots an uncompressed vmlinux through its PVH entry point, which
	# spares the guest a slow xz decompression under TCG.
	if [ ! -s "$LAB_BUILD/vmlinux" ]; then
		python3 - "$LAB_BUILD/kroot/boot/vmlinuz-$kv" "$LAB_BUILD/vmlinux.xz" <<'PY'
import sys
d = open(sys.argv[1], 'rb').read()
i = d.find(b'\xfd7zXZ\x00')
if i < 0:
    sys.exit("no xz stream in " + sys.argv[1])
open(sys.argv[2], 'wb').write(d[i:])
PY
		# the xz stream is followed by trailing bytes: xz reports an error after the data
		xz -dc "$LAB_BUILD/vmlinux.xz" >"$LAB_BUILD/vmlinux" 2>/dev/null || true
		rm -f "$LAB_BUILD/vmlinux.xz"
		[ -s "$LAB_BUILD/vmlinux" ] || { log "kernel: could not extract vmlinux"; return 1; }
	fi
	log "kernel: $kv"
}

# Modules, in dependency order. rdma_rxe needs a crc32 implementation that
# modules.dep does not list: without it `rdma link add` fails with ENOENT.
# sch_netem: the loss cuts (lab/lib/rows.sh).
LAB_MODULES="virtio_pci virtio_net 9p 9pnet_virtio crc32_generic crc32-pclmul rdma_rxe ib_uverbs rdma_ucm sch_netem"

setup_initramfs() {
	local kv ird=$LAB_BUILD/initramfs.d
	kv=$(cat "$LAB_BUILD/kver")
	rm -rf "$ird"
	mkdir -p "$ird"/{bin,proc,sys,dev,lib/modules}
	cp /bin/busybox "$ird/bin/busybox"
	local m
	for m in $LAB_MODULES; do
		modprobe -d "$LAB_BUILD/kroot" -S "$kv" --show-depends "$m"
	done | awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' | while read -r p; do
		cp "$p" "$ird/lib/modules/"
		basename "$p" >>"$ird/modules.order"
	done
	install -m 0755 "$LAB_REPO/lab/initramfs/init" "$ird/init"
	(cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) >"$LAB_BUILD/initramfs.gz"
	log "initramfs: $(stat -c %s "$LAB_BUILD/initramfs.gz") bytes, $(wc -l <"$ird/modules.order") modules"
}

# Host builds. A missing or broken component is recorded in build/status
# (one "name ok|skip reason" line each); the rows that need it report SKIP.
setup_builds() {
	local st=$LAB_BUILD/status
	: >"$st"
	export PATH=$PATH:/usr/local/go/bin
	if [ ! -d "$LAB_REPO/cmd/libibpath" ]; then
		echo "shim skip ./cmd/libibpath does not exist in this checkout" >>"$st"
	elif (cd "$LAB_REPO" && timeout 600 cmd/libibpath/build.sh "$LAB_BUILD/libibpath.so") \
		>"$LAB_BUILD/shim-build.log" 2>&1; then
		echo "shim ok" >>"$st"
	else
		rm -f "$LAB_BUILD/libibpath.so" "$LAB_BUILD/libibpath-core.so"
		echo "shim skip go build ./cmd/libibpath failed: $(grep -m1 -v '^#' "$LAB_BUILD/shim-build.log" | cut -c1-160)" >>"$st"
	fi
	if [ ! -d "$LAB_REPO/verbs/ibv" ]; then
		echo "ibvtest skip ./verbs/ibv does not exist in this checkout" >>"$st"
	elif (cd "$LAB_REPO" && timeout 600 go test -c -o "$LAB_BUILD/ibv.test" ./verbs/ibv) \
		>"$LAB_BUILD/ibvtest-build.log" 2>&1 && [ -x "$LAB_BUILD/ibv.test" ]; then
		echo "ibvtest ok" >>"$st"
	else
		rm -f "$LAB_BUILD/ibv.test"
		echo "ibvtest skip go test -c ./verbs/ibv failed: $(grep -m1 -v '^#' "$LAB_BUILD/ibvtest-build.log" | cut -c1-160)" >>"$st"
	fi
	if (cd "$LAB_REPO" && timeout 600 go build -o "$LAB_BUILD/ibpathd" ./cmd/ibpathd &&
		timeout 600 go build -o "$LAB_BUILD/ibpath" ./cmd/ibpath) >"$LAB_BUILD/daemon-build.log" 2>&1; then
		echo "daemon ok" >>"$st"
	else
		echo "daemon skip go build ./cmd/ibpathd ./cmd/ibpath failed: $(grep -m1 -v '^#' "$LAB_BUILD/daemon-build.log" | cut -c1-160)" >>"$st"
	fi
	if ! command -v mpicc >/dev/null 2>&1; then
		echo "mpi skip mpicc not found (openmpi-bin/libopenmpi-dev not installed)" >>"$st"
	elif mpicc -O2 -Wall -o "$LAB_BUILD/mpi_check" "$LAB_REPO/lab/mpi/mpi_check.c" >"$LAB_BUILD/mpi-build.log" 2>&1; then
		echo "mpi ok" >>"$st"
	else
		echo "mpi skip mpicc failed: $(head -1 "$LAB_BUILD/mpi-build.log" | cut -c1-160)" >>"$st"
	fi
	if gcc -O2 -Wall -o "$LAB_BUILD/nccl_pattern" "$LAB_REPO/lab/nccl/nccl_pattern.c" -ldl -lpthread >"$LAB_BUILD/nccl-build.log" 2>&1; then
		echo "nccl ok" >>"$st"
	else
		echo "nccl skip gcc lab/nccl/nccl_pattern.c failed: $(head -1 "$LAB_BUILD/nccl-build.log" | cut -c1-160)" >>"$st"
	fi
	while read -r name rest; do log "build: $name $rest"; done <"$st"
}

# build_status NAME: "ok" or the reason it is skipped.
build_status() {
	local l
	l=$(awk -v n="$1" '$1==n{ $1=""; sub(/^ /,""); print; exit }' "$LAB_BUILD/status" 2>/dev/null)
	case "$l" in
	ok) echo ok ;;
	skip*) echo "${l#skip }" ;;
	*) echo "not built (run lab/run.sh setup)" ;;
	esac
}
