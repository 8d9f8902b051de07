# shellcheck shell=bash
# lab/lib/rows.sh: the rows of the lab run. A row is one program, run once
# without or with the shim, with or without a cable cut. Its raw material
# (program output on both sides, a meta file of key=value lines) goes to
# $LAB_OUT/rows/<row>/; lab/report.py turns all rows into the report.
# Sourced by lab/run.sh.
#
# Arms (the middle of a row's name, program.arm.cut): off, no shim; on,
# the shim with its defaults (plus LAB_SHIM_ENV), which do not switch back
# (LAB_SHIM_ENV=IBPATH_SWITCHBACK=on makes it: after a failover the QPs come
# home once their port returns); sb, the shim with
# IBPATH_SWITCHBACK=on named (after LAB_SHIM_ENV, so it holds whatever
# that says), the arm of the rows that exist only there (flap2, flap3,
# the -r3 programs) and of the drain and loss rows' second run. A shim
# row's meta says whether its shim switches back (switchback=on|off:
# shim_switchback); the report's verdicts that want the QPs home read it.
#
# perftest runs with --use_old_post_send (ibv_post_send; by default
# perftest 4.5 posts through the ibv_wr_* API), so that its figures compare
# with the runs before the shim interposed ibv_wr_*; the pingpong-wr rows
# (ibv_rc_pingpong -N) post through that API.
#
# Programs: server side in g2, client side (and mpirun) in g1. The RDMA
# traffic goes over link A (rxe0, 10.77.0.x); the programs' TCP control
# connection goes over link B (10.77.1.x), so that cutting link A cuts the
# RDMA path only. MPI (over TCP, see docs/LAB.md) uses link A for its data.
#
# Cuts (on link A, LAB_CUT_AT s after the traffic started, for LAB_CUT_FOR s,
# then the link is restored):
#   setlink-g1 / setlink-g2   QEMU monitor "set_link n0 off" on that guest's end
#   ipdown-g1 / ipdown-g2     "ip link set eth0 down" inside that guest
#   drain-g1                  no cut: an operator's "ibpath drain --port rxe0:1
#                             --wait" in g1 (the link stays up), then after
#                             LAB_CUT_FOR s "ibpath undrain", in one guest
#                             command (shim rows only; the report
#                             requires both to succeed, a failover, and with
#                             the shim switching back the QPs home again)
#   loss-g1 / loss-g2         no cut: "tc qdisc add dev eth0 root netem loss
#                             LAB_LOSS_PCT%" inside that guest (link A lossy,
#                             up throughout) for LAB_LOSS_FOR s, then removed
#                             (shim rows only; run only when named, with
#                             LAB_DAEMON_ARGS='--health on'). That guest's ibpathd finds
#                             rxe0:1 degraded from its counters and takes
#                             it out of service; the report requires the
#                             shim told of it, a failover, no error, and
#                             with the shim switching back the QPs home
#                             again once the port is back in service
#                             (docs/DAEMON.md, "Port health")
#   flap3-g1                  setlink-g1 three times in 10 s: down
#                             LAB_FLAP3_DOWN s, up LAB_FLAP3_UP s between
#                             (sb arm only). Each failover may meet the
#                             switch back of the one before (with
#                             LAB_SHIM_ENV=IBPATH_SWITCHBACK_DAMPING=on the
#                             QPs stay on the backup after the second pull
#                             until the port's penalty has decayed, about
#                             a minute); the report requires no error, a
#                             failover, and the QPs home at the end
#   stop-g1                   no cut: the program in g1 stopped (SIGSTOP)
#                             for LAB_CUT_FOR s, then continued (SIGCONT),
#                             as a batch system suspends a job and a
#                             debugger attaches; the link up throughout
#                             (the report requires that it stopped one)
#   flap2-g1                  setlink-g1 twice: LAB_FLAP_GAP s after the
#                             first restore (the traffic home by then),
#                             the link goes down again for LAB_CUT_FOR s
#                             (sb arm only; the report requires the second
#                             failover handed over through the mailbox on
#                             both ends, and the QPs home after each pull)
#
# Shim rows run with an ibpathd in each guest (lab/guest/daemon.sh): the
# shim attaches to it, its backup QPs on rxe1 get connected through it,
# and a cut of link A fails over onto link B. The cut guest watches its
# eth0 go down (cutwatch), so the time from the cut to the first good
# completion on the backup path is measured on one clock.

LAB_CUT_AT=${LAB_CUT_AT:-1}
# the stuck dump looks this many seconds before the programs' limit (more
# to catch a hang early, or in a guest too slow for the default; 0 to 40)
LAB_STUCK_LEAD=${LAB_STUCK_LEAD:-4}
LAB_CUT_FOR=${LAB_CUT_FOR:-2}
# flap2 cuts: seconds from the first restore to the second pull (the
# switch back took 0.1 to 3.3 s after PORT_ACTIVE in the sb rows)
LAB_FLAP_GAP=${LAB_FLAP_GAP:-10}
# flap3 cuts: each pull's length and the time up between pulls
LAB_FLAP3_DOWN=${LAB_FLAP3_DOWN:-1}
LAB_FLAP3_UP=${LAB_FLAP3_UP:-1.5}
# loss cuts: the share of packets link A loses, and for how long
LAB_LOSS_PCT=${LAB_LOSS_PCT:-5}
LAB_LOSS_FOR=${LAB_LOSS_FOR:-15}
LAB_BW_SECONDS=${LAB_BW_SECONDS:-3}
LAB_LAT_ITERS=${LAB_LAT_ITERS:-4000}
LAB_PERF_REPS=${LAB_PERF_REPS:-3}
LAB_PP_ITERS=${LAB_PP_ITERS:-800}
LAB_EV_ITERS=${LAB_EV_ITERS:-1000}
LAB_MPI_SECONDS=${LAB_MPI_SECONDS:-6}
LAB_RPING_COUNT=${LAB_RPING_COUNT:-300}
# rows with a cut run longer, so that the cut and the restore fall inside the traffic
LAB_CUT_BW_SECONDS=${LAB_CUT_BW_SECONDS:-20}
LAB_CUT_LAT_ITERS=${LAB_CUT_LAT_ITERS:-5000}
LAB_CUT_PP_ITERS=${LAB_CUT_PP_ITERS:-1000}
LAB_CUT_MPI_SECONDS=${LAB_CUT_MPI_SECONDS:-20}
LAB_CUT_RPING_COUNT=${LAB_CUT_RPING_COUNT:-1500}
# ibv_srq_pingpong: exchanges in all (over its 16 QPs); ucx_perftest: puts of 64 KiB
LAB_SRQ_ITERS=${LAB_SRQ_ITERS:-2000}
LAB_CUT_SRQ_ITERS=${LAB_CUT_SRQ_ITERS:-6000}
LAB_UCX_ITERS=${LAB_UCX_ITERS:-500}
LAB_CUT_UCX_ITERS=${LAB_CUT_UCX_ITERS:-2000}

# The row list: "program cut" pairs; every pair runs without, then with the shim.
LAB_ROW_LIST="
pingpong none
pingpong-ev none
write_bw none
send_bw none
send_bw-ev none
pingpong-wr none
read_bw none
write_lat none
mpi none
mpi-verbs none
ibvtest-local none
ibvtest-pair none
ibpathd none
pingpong setlink-g1
pingpong ipdown-g2
write_bw setlink-g2
write_bw ipdown-g1
write_bw-q4 setlink-g2
write_bw-bi setlink-g1
send_bw setlink-g1
send_bw ipdown-g1
pingpong-ev setlink-g1
pingpong-ev ipdown-g2
send_bw-ev setlink-g2
pingpong-wr setlink-g1
pingpong-wr ipdown-g2
read_bw setlink-g2
read_bw ipdown-g2
write_lat setlink-g1
write_lat ipdown-g2
mpi setlink-g2
mpi ipdown-g1
mpi-verbs setlink-g2
mpi-verbs ipdown-g1
rping none
rping setlink-g1
nccl none
nccl setlink-g1
nccl ipdown-g2
srq_pingpong none
ucx_put_bw none
mpi-ucx none
srq_pingpong setlink-g1
srq_pingpong ipdown-g2
ucx_put_bw ipdown-g1
mpi-ucx ipdown-g2
pingpong-ev drain-g1
pingpong-ev flap2-g1
pingpong-ev loss-g1
pingpong-ev flap3-g1
pingpong-ev stop-g1
nccl-r3 setlink-g1
"

# uncut_ack CUT: the ACK timeout option of a perftest bandwidth row's
# ends. An uncut row runs at 18 (1 s, "-u 18 "): it has no failure to
# detect, and at perftest's 14 (67 ms) a TCG guest's slow ACKs make
# rdma_rxe retransmit, and this kernel's rdma_rxe may rebuild a
# retransmitted multi-packet message wrongly, which the peer refuses
# (remote invalid request), with or without the shim
# (docs/results/lab-2026-11.md, "The remote invalid request, found";
# send_bw-ev.off.none in the full run at 54cebe2). A cut row keeps
# perftest's 14: its off arm fails by retry exceeded, and its figures
# are measured at that timeout.
uncut_ack() {
	if [ "$1" = none ]; then echo "-u 18 "; fi
}

# prog_cmds PROG PORT: sets SERVER (g2), CLIENT (g1), MARKER (client output
# line that says the traffic runs; empty: LAB_CUT_AT counts from the start),
# SMARKER (server output line that says it listens; empty: 1 s after its
# start), MWAIT (seconds to wait for MARKER before cutting anyway), LIMIT
# (seconds the client may take), ARMWAIT (under the shim, seconds to
# wait after MARKER for both guests' QPs to have their backups connected;
# empty: no wait) and SGRACE (seconds the server may take after the
# client ended).
prog_cmds() {
	local p=$2 common secs
	local LAB_BW_SECONDS=$LAB_BW_SECONDS LAB_LAT_ITERS=$LAB_LAT_ITERS LAB_PP_ITERS=$LAB_PP_ITERS LAB_MPI_SECONDS=$LAB_MPI_SECONDS
	local LAB_RPING_COUNT=$LAB_RPING_COUNT LAB_SRQ_ITERS=$LAB_SRQ_ITERS LAB_UCX_ITERS=$LAB_UCX_ITERS
	if [ "$3" != none ]; then
		LAB_BW_SECONDS=$LAB_CUT_BW_SECONDS LAB_LAT_ITERS=$LAB_CUT_LAT_ITERS
		LAB_PP_ITERS=$LAB_CUT_PP_ITERS LAB_MPI_SECONDS=$LAB_CUT_MPI_SECONDS
		LAB_RPING_COUNT=$LAB_CUT_RPING_COUNT LAB_SRQ_ITERS=$LAB_CUT_SRQ_ITERS
		LAB_UCX_ITERS=$LAB_CUT_UCX_ITERS
	fi
	# mpirun hands the remote rank only the variables it names with -x:
	# under the shim, every exported IBPATH_* of the row (LAB_SHIM_ENV and
	# the arm sb's switch back included), so both ranks run the same shim
	# shellcheck disable=SC2016 # expanded in the guest
	local mpi_shim_x='${LD_PRELOAD:+-x LD_PRELOAD $(compgen -e IBPATH_ | sed "s/^/-x /")}'
	SERVER="" MARKER="#bytes" SMARKER="Waiting for client" MWAIT=20 LIMIT=$((LAB_BW_SECONDS + 30)) CUT_CAP=60 ARMWAIT="" SGRACE=5
	case $1 in
	pingpong | pingpong-ev | pingpong-wr)
		# -ev: the same program sleeping on its completion channel (-e)
		common="ibv_rc_pingpong -d rxe0 -g 1 -c -n $LAB_PP_ITERS -p $p"
		# sleeping frees the guest's vCPU: -e runs two to three times
		# faster under TCG, so twice the iterations keep the cut inside
		[ "$1" = pingpong-ev ] && common="ibv_rc_pingpong -d rxe0 -g 1 -c -n $((LAB_PP_ITERS * 2)) -p $p -e"
		# -wr: posting through the ibv_wr_* API (-N)
		[ "$1" = pingpong-wr ] && common="$common -N"
		# a drain waits for the traffic to leave, then the undrain for it
		# to come home: four times the cut rows' iterations, and the
		# program sleeping (-ev) leaves the guests' vCPU to the ibpath
		# commands (a busy pingpong held them up for tens of seconds)
		# a flap2 cut pulls the cable twice, the second time once the
		# traffic came home (LAB_FLAP_GAP after the first restore): as
		# long a run as a drain's
		# a loss cut: the port found degraded, its traffic moved, the loss
		# over, the port back after the health rule's clear time (30 s)
		[[ "$3" == drain-* || "$3" == flap2-* || "$3" == loss-* ]] && common="ibv_rc_pingpong -d rxe0 -g 1 -c -n $((LAB_CUT_PP_ITERS * 8)) -p $p -e"
		# a flap3 cut: damped, the traffic comes home about a minute after
		# the last pull
		[[ "$3" == loss-* || "$3" == flap3-* ]] && common="ibv_rc_pingpong -d rxe0 -g 1 -c -n $((LAB_CUT_PP_ITERS * 16)) -p $p -e"
		SERVER="stamp $common" CLIENT="stamp $common 10.77.1.2" MARKER="remote address" SMARKER="local address" LIMIT=60
		if [[ "$3" == drain-* || "$3" == flap2-* ]]; then LIMIT=150 CUT_CAP=150; fi
		# 16,000 event-driven exchanges take 120 to 200 s under TCG
		# (7.5 to 12.5 ms each; more with a debug log or LAB_QP_WATCH):
		# at 200 s the rows ran out of time 15,300 exchanges in, still
		# exchanging
		if [[ "$3" == loss-* || "$3" == flap3-* ]]; then LIMIT=360 CUT_CAP=360; fi ;;
	write_bw | send_bw | read_bw)
		common="ib_$1 -d rxe0 -x 1 -F --use_old_post_send $(uncut_ack "$3")-D $LAB_BW_SECONDS -p $p"
		SERVER="stamp $common" CLIENT="stamp $common 10.77.1.2" ;;
	write_bw-q4)
		# four QPs failing over at once: the report gives the first and
		# the last QP's first good completion on the backup. ACK timeout
		# 18 (-u), as write_bw-bi: the backup QPs take the program's, and
		# at perftest's 14 (67 ms) four QPs replaying 128 WRITEs each on
		# a TCG guest's link time out, and this kernel's rdma_rxe may
		# rebuild a retransmitted WRITE wrongly (a remote invalid request
		# on a backup QP 0.7 s after its failover, in the full run at
		# 8a0391f)
		common="ib_write_bw -d rxe0 -x 1 -F --use_old_post_send -q 4 -u 18 -D $LAB_BW_SECONDS -p $p"
		SERVER="stamp $common" CLIENT="stamp $common 10.77.1.2" ;;
	write_bw-bi)
		# both ends write at once (-b): each QP's traffic runs both
		# ways, and both directions fail over together. ACK timeout 18
		# (1 s, -u): at perftest's 14 (67 ms) a TCG guest's slow ACKs
		# make rdma_rxe retransmit, and this kernel's rdma_rxe may
		# rebuild a retransmitted WRITE wrongly, which the peer refuses
		# (remote invalid request), with or without the shim
		# (docs/results/lab-2026-11.md, "The remote invalid request, found")
		common="ib_write_bw -d rxe0 -x 1 -F --use_old_post_send -b -u 18 -D $LAB_BW_SECONDS -p $p"
		SERVER="stamp $common" CLIENT="stamp $common 10.77.1.2" ;;
	send_bw-ev)
		# sleeping on its completion channel (-e); perftest has no
		# duration mode with events: a count of 64 KiB messages
		common="ib_send_bw -d rxe0 -x 1 -F --use_old_post_send -e $(uncut_ack "$3")-n $LAB_EV_ITERS -p $p"
		SERVER="stamp $common" CLIENT="stamp $common 10.77.1.2" LIMIT=60 ;;
	write_lat)
		common="ib_write_lat -d rxe0 -x 1 -F --use_old_post_send -n $LAB_LAT_ITERS -p $p"
		# a ping-pong paced by the guests' round trip: under a slow TCG
		# host (7 to 20 ms a round trip, 50 to 100 iterations a second
		# on the backup) the cut rows' 5000 iterations take 50 to 100 s,
		# the uncut rows' 4000 up to 50 s
		SERVER="stamp $common" CLIENT="stamp $common 10.77.1.2" LIMIT=90 CUT_CAP=120
		[ "$3" = none ] || LIMIT=120 ;;
	mpi)
		# Open MPI over TCP on link A; launched in g2 through lab/guest/rsh.sh
		CLIENT="export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
stamp mpirun -H 10.77.1.1,10.77.1.2 -np 2 --mca plm_rsh_agent \$LAB_REPO/lab/guest/rsh.sh \\
  --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include eth1 \\
  --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0 \\
  $mpi_shim_x \\
  \$LAB_BUILD/mpi_check $LAB_MPI_SECONDS"
		# MPI's start-up takes 20 s and more under TCG with the shim: a
		# cut must fall in the traffic, not in MPI_Init's connection setup
		MARKER="MPI_CHECK started" MWAIT=45 LIMIT=$((LAB_MPI_SECONDS + 50)) ;;
	mpi-verbs)
		# Open MPI's ofi MTL over libfabric's verbs provider (with ofi_rxm
		# for reliable datagrams) on rxe0: MPI traffic through verbs
		CLIENT="export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
stamp mpirun -H 10.77.1.1,10.77.1.2 -np 2 --mca plm_rsh_agent \$LAB_REPO/lab/guest/rsh.sh \\
  --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include eth1 \\
  --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include 'verbs;ofi_rxm' \\
  -x FI_PROVIDER='verbs;ofi_rxm' -x FI_VERBS_IFACE=eth0 -x FI_UNIVERSE_SIZE=4 -x FI_LOG_LEVEL=${LAB_FI_LOG:-warn} \\
  $mpi_shim_x \\
  \$LAB_BUILD/mpi_check $LAB_MPI_SECONDS"
		MARKER="MPI_CHECK started" MWAIT=45 LIMIT=$((LAB_MPI_SECONDS + 50)) ;;
	mpi-ucx)
		# Open MPI's ucx PML on UCX's rc_verbs (its QPs receive through
		# the iface's shared receive queue) on rxe0, wired up over
		# ud_verbs: UCX drops every UD packet rxe delivers unless its
		# GID check is off (docs/LAB.md, "Known limits"). Open MPI's
		# pml ucx takes only mlx* devices unless told otherwise.
		CLIENT="export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
stamp mpirun -H 10.77.1.1,10.77.1.2 -np 2 --mca plm_rsh_agent \$LAB_REPO/lab/guest/rsh.sh \\
  --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include eth1 \\
  --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca btl self \\
  -x UCX_TLS=self,rc_verbs,ud_verbs -x UCX_NET_DEVICES=rxe0:1 -x UCX_IB_GID_INDEX=1 \\
  -x UCX_UD_VERBS_ETH_DGID_CHECK=n -x UCX_LOG_LEVEL=${LAB_UCX_LOG:-info} \\
  $mpi_shim_x \\
  \$LAB_BUILD/mpi_check $LAB_MPI_SECONDS"
		MARKER="MPI_CHECK started" MWAIT=45 LIMIT=$((LAB_MPI_SECONDS + 50)) ;;
	srq_pingpong)
		# rdma-core's ibv_srq_pingpong: 16 RC QPs whose receives all come
		# from one shared receive queue; -n counts the exchanges of all
		# QPs together
		common="ibv_srq_pingpong -d rxe0 -g 1 -c -n $LAB_SRQ_ITERS -p $p"
		SERVER="stamp $common" CLIENT="stamp $common 10.77.1.2" MARKER="remote address" SMARKER="local address" LIMIT=60
		# the client prints its peers' addresses before it connects its
		# 16 QPs, and an SRQ's QPs fail over only all together: under
		# the shim the cut waits for every backup to be connected (10 to
		# 13 s under TCG, ibpath status included). After the failover
		# every poll and post goes through the shim's Go runtime (an
		# SRQ's QPs have no express lane), several times slower under
		# TCG: 120 s, and the server, which ends on its last
		# completions after the client, 15 s more
		if [ "$3" != none ]; then ARMWAIT=30 LIMIT=120 CUT_CAP=120 SGRACE=15; fi ;;
	ucx_put_bw)
		# UCX's rc_verbs transport at the UCT level (no UCP wire-up: the
		# addresses go over ucx_perftest's TCP connection): RDMA WRITEs
		# of 64 KiB (zero copy) on QPs made on the iface's shared receive
		# queue. It prints its first report a second into the traffic.
		common="ucx_perftest -x rc_verbs -d rxe0:1 -t put_bw -D zcopy -s 65536 -n $LAB_UCX_ITERS -w 100 -p $p"
		SERVER="export UCX_IB_GID_INDEX=1
stamp $common" CLIENT="export UCX_IB_GID_INDEX=1
stamp $common 10.77.1.2"
		MARKER="thread 0]" SMARKER="Waiting for connection" LIMIT=60
		# the cut rows' 2000 puts went past 60 s on a slow host
		if [ "$3" != none ]; then LIMIT=120 CUT_CAP=120; fi ;;
	rping)
		# an rdma_cm program (librdmacm's rping): each ping is a SEND of
		# the client's buffer, the server's RDMA READ of it, its RDMA
		# WRITE back and a SEND; after -C pings both ends disconnect
		# (rdma_disconnect: the QP to ERR) and must exit at once, after a
		# failover too (they waited for flushes that never came)
		SERVER="stamp rping -s -a 10.77.0.2 -p $p -C $LAB_RPING_COUNT"
		CLIENT="stamp rping -c -a 10.77.0.2 -p $p -C $LAB_RPING_COUNT -v"
		MARKER="ping data" SMARKER="" LIMIT=60
		# the cut rows' pings: 3000 took 21 s on a fast host, 80 s without
		# the shim and over 130 s with it (21 a second) on a slow one,
		# past the 120 s limit though running; 1500 still outlast the
		# cut and the restore on the fast one
		if [ "$3" != none ]; then LIMIT=120 CUT_CAP=120; fi ;;
	nccl | nccl-r3)
		# a program of NCCL's shape (lab/nccl/nccl_pattern.c): libibverbs
		# opened with dlopen and every verb from dlvsym, a send and a
		# receive QP each way, Simple protocol's FIFO of clear-to-sends
		# and RDMA WRITE + WRITE_WITH_IMM, every byte checked, an async
		# thread that aborts on the events NCCL takes as fatal, NCCL's
		# default ACK timeout (20: 4.3 s). -r3: with NCCL_IB_RETRY_CNT=3,
		# a count at which rdma_rxe gives up, as every count does on
		# hardware (at 7 it retransmits without end), and timeout 15 (134
		# ms), so that a probe of the default path still down fails with
		# an error within the shim's 1 s and the reset that follows is
		# paired through the mailbox (at older NCCL's 14, 67 ms, a TCG
		# guest is slow enough for four timeouts in a row on a path that
		# loses nothing: the backup QPs failed so in 2 of 3 runs); its
		# verdict wants the QPs home after the cut (the failover and the
		# return each take seconds under TCG)
		secs=$LAB_BW_SECONDS
		# a cut row waits for its backups (up to 20 s) before the cut, and
		# an ip-down cut is a guest command of seconds: nccl.on.ipdown-g2
		# ended 5 s before its cut came with 20 s of traffic, and 6 s
		# before with 35 (its armed wait 19.7 s, the cut 41 s after the
		# traffic started). nccl-r3 wants time after the restore too
		[ "$3" != none ] && secs=$((LAB_BW_SECONDS + 40))
		common="\$LAB_BUILD/nccl_pattern -d rxe0 -g 1 -p $p -D $secs"
		[ "$1" = nccl-r3 ] && common="env NCCL_IB_RETRY_CNT=3 NCCL_IB_TIMEOUT=15 $common"
		SERVER="stamp $common" CLIENT="stamp $common 10.77.1.2"
		MARKER="NCCL_PATTERN traffic started" SMARKER="listening on port" LIMIT=$((secs + 30))
		# its traffic starts as soon as its QPs connect, before layer 2
		# has connected their backups (1 to 3 s under TCG): a cut in
		# between reaches it as plain verbs report it, the documented
		# limit, not what the row tests (CI's lab met it at 7f00933).
		# The cut rows keep their whole limit (the cap is 60 s)
		if [ "$3" != none ]; then ARMWAIT=20 CUT_CAP=$LIMIT; fi ;;
	ibpathd)
		# ibpathd on the real rxe devices of both guests, replicating over
		# link B; a pingpong under the shim attaches to it (lab/guest/ibpathd.sh)
		SERVER="bash \$LAB_REPO/lab/guest/ibpathd.sh server $p"
		CLIENT="bash \$LAB_REPO/lab/guest/ibpathd.sh client $p"
		# 85 s on fresh guests here, 147 s after many runs, 239 s as the
		# 15th row of a run on a slow host, 252 s on fresh guests once, and
		# over 300 s with the host busy: its 6000-exchange pingpong under
		# the shim must outlive the checks made while it runs
		MARKER="" SMARKER="" LIMIT=420 ;;
	ibvtest-local)
		CLIENT="cd \$LAB_BUILD && IBPATH_LAB=1 stamp ./ibv.test -test.run '^TestLabLocal' -test.v -test.timeout 120s"
		MARKER="" LIMIT=150 ;;
	ibvtest-pair)
		SERVER="cd \$LAB_BUILD && IBPATH_LAB=1 IBPATH_LAB_ROLE=server IBPATH_LAB_LISTEN=10.77.1.2:$p stamp ./ibv.test -test.run '^TestLabPair' -test.v -test.timeout 120s"
		CLIENT="cd \$LAB_BUILD && IBPATH_LAB=1 IBPATH_LAB_ROLE=client IBPATH_LAB_PEER=10.77.1.2:$p stamp ./ibv.test -test.run '^TestLabPair' -test.v -test.timeout 120s"
		MARKER="" SMARKER="" LIMIT=150 ;;
	*) die "unknown program $1" ;;
	esac
}

# flap3_script: the monitor script of a flap3 cut: link A down
# LAB_FLAP3_DOWN s, up LAB_FLAP3_UP s, three times.
flap3_script() {
	local k out=""
	for k in 1 2 3; do
		out+="set_link n0 off; sleep $LAB_FLAP3_DOWN; set_link n0 on"
		[ "$k" = 3 ] || out+="; sleep $LAB_FLAP3_UP; "
	done
	echo "$out"
}

# cut_apply CUT on|off
cut_apply() {
	local g=${1#*-} state=$2
	case $1 in
	setlink-* | flap2-*) monitor "$g" "set_link n0 $state" ;;
	flap3-*)
		# the three pulls, one script on one monitor connection: a
		# monitor command of its own each cost about a second more under
		# TCG (three pulls then took 11.2 s as the guest saw them)
		if [ "$state" = off ]; then
			monitor_script "$g" "$(flap3_script)"
		else
			echo "restored by the pulls' script"
		fi ;;
	ipdown-*) gexec "$g" 10 "echo CUT_NS \$(date +%s%N); ip link set eth0 $([ "$state" = off ] && echo down || echo up)" ;;
	loss-*)
		if [ "$state" = off ]; then
			gexec "$g" 10 "echo CUT_NS \$(date +%s%N); tc qdisc add dev eth0 root netem loss $LAB_LOSS_PCT%"
		else
			gexec "$g" 10 "tc qdisc del dev eth0 root; echo RESTORE_NS \$(date +%s%N)"
		fi ;;
	stop-*)
		# the row's programs in that guest: ibv_rc_pingpong
		local out
		if [ "$state" = off ]; then
			out=$(gexec "$g" 10 "echo CUT_NS \$(date +%s%N); echo STOPPED \$(pkill -STOP -e -x ibv_rc_pingpong | wc -l)")
			meta stopped "$(awk '/^STOPPED/ {print $2}' <<<"$out")"
		else
			out=$(gexec "$g" 10 "pkill -CONT -x ibv_rc_pingpong; echo RESTORE_NS \$(date +%s%N)")
		fi
		echo "$out" ;;
	drain-*)
		# the guest's ibpathd (lab/guest/daemon.sh) on its default socket.
		# The drain, LAB_CUT_FOR s drained, and the undrain are one guest
		# command: under TCG each host round trip into a busy guest costs
		# seconds, and the program may end before a separate undrain
		# arrives. The restore step has nothing left to do.
		local out
		if [ "$state" = on ]; then
			echo "undrained by the drain step"
			return 0
		fi
		out=$(gexec "$g" $((LAB_CUT_FOR + 110)) "\$LAB_BUILD/ibpath --timeout 30s drain --port rxe0:1 --wait 40s; echo DRAIN_RC \$?; sleep $LAB_CUT_FOR; echo UNDRAIN_NS \$(date +%s%N); \$LAB_BUILD/ibpath --timeout 30s undrain --port rxe0:1; echo UNDRAIN_RC \$?")
		meta drain_rc "$(awk '/^DRAIN_RC/ {print $2}' <<<"$out")"
		meta undrain_ns "$(awk '/^UNDRAIN_NS/ {print $2}' <<<"$out")"
		meta undrain_rc "$(awk '/^UNDRAIN_RC/ {print $2}' <<<"$out")"
		echo "$out"
		;;
	esac
}

# meta KEY VALUE...: append to the current row's meta file.
meta() { local k=$1; shift; echo "$k=$*" >>"$ROW_DIR/meta"; }

# shim_arm ARM: whether the arm runs its program under the shim (on, sb;
# not off, nor ctl, the control arm: the program again without it).
shim_arm() { [ "$1" = on ] || [ "$1" = sb ]; }

# shim_switchback ARM: "on" when the shim of a shim arm switches back,
# else "off". sb names IBPATH_SWITCHBACK=on after LAB_SHIM_ENV; on runs
# the shim's default (off) unless LAB_SHIM_ENV sets IBPATH_SWITCHBACK (its
# last setting counts, as in export): 1, on, yes, true (any case) turn it
# on; empty keeps the default; any other value is off (0, off, no, false;
# a value the shim does not take disables the whole shim).
shim_switchback() {
	local w v="" words=()
	[ "$1" = sb ] && { echo on; return 0; }
	read -ra words <<<"${LAB_SHIM_ENV:-}"
	for w in "${words[@]}"; do
		case $w in IBPATH_SWITCHBACK=*) v=${w#IBPATH_SWITCHBACK=} ;; esac
	done
	v=${v//[\"\']/}
	case ${v,,} in 1 | on | yes | true) echo on ;; *) echo off ;; esac
}

# server_dump NAME: the stuck dump of g2's programs now (into the row's
# stuck-server.out), whatever their age
server_dump() {
	local j
	j=$(job_submit g2 "$1-sdump" 90 "stuck_dump 1")
	job_wait "$j" 85 || true
	[ -s "$j.out" ] && cp "$j.out" "$ROW_DIR/stuck-server.out"
	return 0
}

# dumps_wait JOB...: waits for the stuck dumps under way among the dump
# jobs JOB (each up to 75 s: gdb takes 10 to 40 s under TCG, and holds its
# program meanwhile); 0 when there was one.
dumps_wait() {
	local j waited=1
	for j in "$@"; do
		if grep -q '^STUCK' "$j.out" 2>/dev/null && [ ! -e "$j.rc" ]; then
			job_wait "$j" 75 >/dev/null || true
			waited=0
		fi
	done
	return $waited
}

# row_run PROG SHIM CUT PORT [REP]: REP is the repetition (1), or "again"
# for the one retry of a row whose guests were rebooted (row_again).
row_run() {
	local prog=$1 shim=$2 cut=$3 port=$4 name envs="" st js="" jc t0 tcut tcut_done trest rc_c=0 rc_s=0 g rep=${5:-1}
	name=$prog.$shim.$cut
	case $rep in
	1) ;;
	again) name=$name.again rep=1 ;;
	*) name=$name.r$rep ;;
	esac
	ROW_DIR=$LAB_OUT/rows/$name
	rm -rf "$ROW_DIR"
	mkdir -p "$ROW_DIR"
	meta started "$(now)"; meta name "$name"; meta prog "$prog"; meta shim "$shim"; meta cut "$cut"; meta rep "$rep"
	case $prog in
	ibvtest-*) st=$(build_status ibvtest) ;;
	ibpathd) st=$(build_status daemon) ;;
	nccl) st=$(build_status nccl) ;;
	mpi | mpi-verbs | mpi-ucx) st=$(build_status mpi) ;;
	ucx_put_bw) st=ok; command -v ucx_perftest >/dev/null || st="ucx_perftest not found (ucx-utils not installed)" ;;
	*) st=ok ;;
	esac
	if [ "$st" = ok ] && shim_arm "$shim"; then st=$(build_status shim); fi
	if [ "$st" != ok ]; then
		meta status SKIP; meta reason "$st"
		log "row $name: SKIP ($st)"
		return 0
	fi
	if shim_arm "$shim"; then
		envs="export LD_PRELOAD=\$LAB_BUILD/libibpath.so IBPATH_LOG=${LAB_SHIM_LOG:-info} ${LAB_SHIM_ENV:-}"
		# the arm sb: the switch back named, last, so that LAB_SHIM_ENV
		# cannot turn it off
		[ "$shim" = sb ] && envs="$envs IBPATH_SWITCHBACK=on"
		meta switchback "$(shim_switchback "$shim")"
	fi
	prog_cmds "$prog" "$port" "$cut"
	# a cut row that hangs (no completion after a local ip-down) must not eat the
	# CI budget: at most CUT_CAP (60 s; write_lat, rping, srq_pingpong, ucx_put_bw 120 s), or exactly
	# LAB_CUT_LIMIT seconds when it is set
	if [ "$cut" != none ]; then
		if [ -n "${LAB_CUT_LIMIT:-}" ]; then LIMIT=$LAB_CUT_LIMIT; elif [ "$LIMIT" -gt "$CUT_CAP" ]; then LIMIT=$CUT_CAP; fi
	fi
	# a row that may not end within LAB_BUDGET is not started: its limit,
	# plus the server's start and the teardown, plus a cut row's recovery
	# check, plus an ip-down row's rdma_cm check and repair (bounds for an
	# unlucky run, not the typical times)
	local need=$((LIMIT + 20))
	[ "$cut" != none ] && need=$((need + 40))
	[[ "$cut" == flap2-* ]] && need=$((need + LAB_FLAP_GAP + LAB_CUT_FOR + 20))
	[[ "$cut" == loss-* ]] && need=$((need + LAB_LOSS_FOR))
	[[ "$cut" == flap3-* ]] && need=$((need + 20))
	# an ip-down cut's rdma_cm check, and its repair when it fails
	[[ "$cut" == ipdown-* ]] && need=$((need + 60))
	if ! budget_check "$need"; then
		meta status SKIP; meta reason "lab budget: $BUDGET_LEFT s left, the row may take $need s"
		log "row $name: not run (lab budget: $BUDGET_LEFT s left, the row may take $need s)"
		return 0
	fi
	# a guest that is gone (QEMU's deadline, a crash) fails the row at once
	for g in g1 g2; do
		if ! vm_alive "$g"; then
			meta status FAIL; meta reason "guest $g is not running"
			log "row $name: FAIL (guest $g is not running)"
			return 0
		fi
	done
	local cut_for=$LAB_CUT_FOR
	[[ "$cut" == loss-* ]] && cut_for=$LAB_LOSS_FOR
	[[ "$cut" == flap3-* ]] && cut_for=0 # the pulls' script holds its own pauses
	meta cut_at "$LAB_CUT_AT"; meta cut_for "$cut_for"; meta limit "$LIMIT"
	[[ "$cut" == loss-* ]] && meta loss_pct "$LAB_LOSS_PCT"
	case $prog in *_bw) meta duration "$([ "$cut" = none ] && echo "$LAB_BW_SECONDS" || echo "$LAB_CUT_BW_SECONDS")" ;; esac
	if [ "$prog" = rping ]; then meta count "$([ "$cut" = none ] && echo "$LAB_RPING_COUNT" || echo "$LAB_CUT_RPING_COUNT")"; fi
	case $prog in
	srq_pingpong) meta iters "$([ "$cut" = none ] && echo "$LAB_SRQ_ITERS" || echo "$LAB_CUT_SRQ_ITERS")" ;;
	ucx_put_bw) meta iters "$([ "$cut" = none ] && echo "$LAB_UCX_ITERS" || echo "$LAB_CUT_UCX_ITERS")" ;;
	esac
	if [ -n "${LAB_RXE_DEBUG:-}" ]; then
		gexec g1 10 rxe_debug_on >/dev/null || log "row $name: rxe debug messages not on in g1"
		gexec g2 10 rxe_debug_on >/dev/null || log "row $name: rxe debug messages not on in g2"
	fi
	log "row $name: start"
	t0=$(now)
	if [ -n "$SERVER" ]; then
		js=$(job_submit g2 "$name-server" $((LIMIT + 5)) "$envs
$SERVER")
		wait_for 10 test -e "$js.run" || true
		if [ -n "$SMARKER" ]; then
			# under the shim a server starts in seconds (TCG): wait until it listens
			wait_for 30 grep -q -- "$SMARKER" "$js.out" 2>/dev/null || log "row $name: no '$SMARKER' from the server after 30 s"
		fi
		sleep 1
	fi
	jc=$(job_submit g1 "$name-client" "$LIMIT" "$envs
$CLIENT")
	# a program still running 3 s before its limit: each guest writes where
	# its threads wait (kernel stacks, wchan), before the limit kills it
	local jstuck1 jstuck2
	# 4 s before the programs' limit, which waits while gdb holds a
	# program (a dump may take STUCK_GDB_S, 60 s); not earlier: a program
	# that ends while its limit is held fails by it (the limit's alarm
	# fires on the continue), and short rows end near their limit
	# (LAB_STUCK_LEAD s before instead)
	jstuck1=$(job_submit g1 "$name-stuck" $((LIMIT + 70)) "stuck_dump $((LIMIT - LAB_STUCK_LEAD))")
	jstuck2=$(job_submit g2 "$name-stuck" $((LIMIT + 70)) "stuck_dump $((LIMIT - LAB_STUCK_LEAD))")
	local jqw1="" jqw2=""
	if [ -n "${LAB_QP_WATCH:-}" ]; then
		jqw1=$(job_submit g1 "$name-qps" $((LIMIT + 5)) "qp_watch $LAB_QP_WATCH")
		jqw2=$(job_submit g2 "$name-qps" $((LIMIT + 5)) "qp_watch $LAB_QP_WATCH")
	fi
	if [ "$cut" != none ]; then
		local cg=${cut#*-} jw
		if [ -n "$MARKER" ]; then
			wait_for "$MWAIT" grep -q -- "$MARKER" "$jc.out" 2>/dev/null || log "row $name: no '$MARKER' in the client output after $MWAIT s; cutting anyway"
		else
			sleep 5
		fi
		if [ -n "$ARMWAIT" ] && [ "$shim" != off ]; then
			# both guests at once: each job prints ARMED or NOT_ARMED
			local ja=() g a
			for g in g1 g2; do ja+=("$(job_submit "$g" "$name-armed" $((ARMWAIT + 10)) "armed_wait $ARMWAIT")"); done
			for g in 0 1; do
				job_wait "${ja[$g]}" $((ARMWAIT + 20)) || true
				a=$(head -1 "${ja[$g]}.out" 2>/dev/null)
				meta "armed_g$((g + 1))" "${a:-no answer}"
				[[ "$a" == ARMED* ]] || log "row $name: g$((g + 1))'s QPs not all with a connected backup after $ARMWAIT s (${a:-no answer}); cutting anyway"
			done
		fi
		# the cut guest's watch of eth0 starts only now: it forks every
		# 2 ms, and the program's start-up (MPI's takes 20 s and more
		# under TCG) need not share the guest's one vCPU with it
		jw=$(job_submit "$cg" "$name-cutwatch" $((LIMIT + 20)) "for i in \$(seq 1 20000); do read -r s </sys/class/net/eth0/operstate; if [ \"\$s\" != up ]; then echo \"CUT_SEEN \$(ts) \$(date +%s%N) \$s\"; exit 0; fi; sleep 0.002; done; echo CUT_NOT_SEEN")
		wait_for 10 test -e "$jw.run" || true
		sleep "$LAB_CUT_AT"
		tcut=$(now)
		# (a flap3 cut's command returns after its three pulls)
		[[ "$cut" != flap3-* ]] || meta cut_time "$(elapsed "$t0")"
		cut_apply "$cut" off >>"$ROW_DIR/cut.log" 2>&1 || log "row $name: cut failed (see cut.log)"
		[[ "$cut" == flap3-* ]] || meta cut_time "$(elapsed "$t0")"
		# the cut holds cut_for s from the cut command's return
		tcut_done=$(now)
		# guest clocks at the cut (for the gap in the programs' stamped
		# output) and port states, read while the cut holds: a read into
		# a busy guest takes seconds under TCG, and waiting for it here
		# would lengthen the cut (a "2 s" cut lasted 9 to 24 s so). Not
		# for flap3: its pulls are over when its command returns
		local jclk=()
		if [[ "$cut" != flap3-* ]]; then
			for g in g1 g2; do jclk+=("$(job_submit "$g" "$name-cutclock" 5 'ts; rdma link show rxe0/1 >&2')"); done
		fi
		log "row $name: link A cut ($cut)"
		sleep_until "$(echo "$tcut_done + $cut_for" | bc)"
		cut_apply "$cut" on >>"$ROW_DIR/cut.log" 2>&1 || log "row $name: restore failed (see cut.log)"
		trest=$(now)
		meta restore_time "$(elapsed "$t0")"
		meta cut_held "$(printf '%.3f' "$(echo "$trest - $tcut_done" | bc)")"
		for g in 0 1; do
			[ -n "${jclk[$g]:-}" ] || continue
			job_wait "${jclk[$g]}" 15 >/dev/null || true
			cat "${jclk[$g]}.out" >>"$ROW_DIR/cut.log" 2>/dev/null || true
			meta "cut_uptime_g$((g + 1))" "$(head -1 "${jclk[$g]}.out" 2>/dev/null)"
		done
		if [[ "$cut" == flap3-* ]]; then
			meta restore3_time "$(elapsed "$t0")"
			log "row $name: link A pulled three times in $(echo "$(now) - $tcut" | bc) s"
		fi
		# guest wall clocks just after the (last) restore (the switch back
		# is timed from them)
		meta restore_ns_g1 "$(gexec g1 5 'date +%s%N' 2>>"$ROW_DIR/cut.log" | head -1)"
		meta restore_ns_g2 "$(gexec g2 5 'date +%s%N' 2>>"$ROW_DIR/cut.log" | head -1)"
		[[ "$cut" == flap3-* ]] || log "row $name: link A restored after $(echo "$trest - $tcut" | bc) s"
		if [[ "$cut" == flap2-* ]]; then
			# the second pull, once the first one's traffic came home:
			# its failover hands over through the mailbox
			sleep "$LAB_FLAP_GAP"
			cut_apply "$cut" off >>"$ROW_DIR/cut.log" 2>&1 || log "row $name: second cut failed (see cut.log)"
			meta cut2_time "$(elapsed "$t0")"
			log "row $name: link A cut again"
			sleep "$LAB_CUT_FOR"
			cut_apply "$cut" on >>"$ROW_DIR/cut.log" 2>&1 || log "row $name: second restore failed (see cut.log)"
			meta restore2_time "$(elapsed "$t0")"
			meta restore2_ns_g1 "$(gexec g1 5 'date +%s%N' 2>>"$ROW_DIR/cut.log" | head -1)"
			log "row $name: link A restored again"
		fi
		job_wait "$jw" 5 || job_kill "$jw"
		meta "cut_seen_$cg" "$(awk '/^CUT_SEEN/ {print $2}' "$jw.out" 2>/dev/null)"
		meta "cut_seen_ns_$cg" "$(awk '/^CUT_SEEN/ {print $3}' "$jw.out" 2>/dev/null)"
		# ip-down cuts: the guest's wall clock just before the command
		meta "cut_ns_$cg" "$(awk '/^CUT_NS/ {print $2; exit}' "$ROW_DIR/cut.log" 2>/dev/null)"
	fi
	job_wait "$jc" $((LIMIT + 10)) || rc_c=$?
	# a stuck dump holds its program while gdb reads it, and the
	# program's limit waits meanwhile: so do the row's waits, or a
	# program still ending when its dump began fails by the dump
	if dumps_wait "$jstuck1" "$jstuck2" && [ ! -e "$jc.rc" ]; then
		rc_c=0
		job_wait "$jc" 30 || rc_c=$?
	fi
	meta client_rc "$rc_c"
	meta elapsed "$(elapsed "$t0")"
	if [ -n "$js" ]; then
		# a server whose client is gone may wait forever: give it SGRACE s
		# (again after a dump of it that began meanwhile)
		if ! job_wait "$js" "$SGRACE" && ! { dumps_wait "$jstuck2" && job_wait "$js" "$SGRACE"; }; then
			# a server outliving a client that passed is a teardown
			# that hangs (nccl.on.ipdown-g2 in the full run at
			# 54cebe2): its threads' stacks before it is killed
			if shim_arm "$shim" && [ "$rc_c" = 0 ]; then server_dump "$name"; fi
			job_kill "$js"
		fi
		rc_s=$(cat "$js.rc" 2>/dev/null || echo 124)
		meta server_rc "$rc_s"
		cp "$js.out" "$ROW_DIR/server.out" 2>/dev/null || true
	fi
	cp "$jc.out" "$ROW_DIR/client.out" 2>/dev/null || true
	for j in "$jstuck1" "$jstuck2"; do
		# a dump under way is let finish (its user stacks)
		dumps_wait "$j" || true
		job_kill "$j"
		[ -s "$j.out" ] && cp "$j.out" "$ROW_DIR/stuck-$(basename "$(dirname "$j")").out"
	done
	for j in $jqw1 $jqw2; do
		job_kill "$j"
		[ -s "$j.out" ] && cp "$j.out" "$ROW_DIR/qps-$(basename "$(dirname "$j")").out"
	done
	if [ -n "${LAB_RXE_DEBUG:-}" ]; then
		gexec g1 10 'dmesg; rxe_debug_off' >"$ROW_DIR/rxe-g1.log" 2>&1
		gexec g2 10 'dmesg; rxe_debug_off' >"$ROW_DIR/rxe-g2.log" 2>&1
	fi
	ROW_RECOVERED=""
	if [ "$cut" != none ]; then
		row_recovery "$name" "$port" "$envs"
	fi
	case $cut in ipdown-*) row_cm "$name" "${cut#*-}" "$port" ;; esac
	# a link dead below verbs (link A carries the RDMA traffic, link B the
	# programs' TCP and the backup rxe1): the guests are rebooted for the
	# rows after it. Checked after a failed recovery and after a client
	# that failed, cut or not.
	if links_suspect "$ROW_RECOVERED" "$rc_c"; then row_link "$name"; fi
	log "row $name: done in $(elapsed "$t0") s (client rc $rc_c${js:+, server rc $rc_s})"
}

# row_recovery NAME PORT ENVS: after a cut, wait for rxe0 ACTIVE on both
# sides, then check that a fresh connection works on link A.
row_recovery() {
	local g out ok=yes t0 js
	t0=$(now)
	for g in g1 g2; do
		out=$(gexec "$g" 20 'wait_active rxe0 15') || ok=no
		echo "$g: $out" >>"$ROW_DIR/recovery.log"
	done
	meta port_active_s "$(elapsed "$t0")"
	js=$(job_submit g2 "$1-recheck-server" 30 "$3
ibv_rc_pingpong -d rxe0 -g 1 -c -n 50 -p $(($2 + 1))")
	# the server listens once it printed its address (seconds under the shim)
	wait_for 20 grep -qs "local address" "$js.out" || true
	if ! gexec g1 20 "$3
ibv_rc_pingpong -d rxe0 -g 1 -c -n 50 -p $(($2 + 1)) 10.77.1.2" >>"$ROW_DIR/recovery.log" 2>&1; then
		ok=no
	fi
	job_wait "$js" 5 || job_kill "$js"
	{
		echo "recheck server (g2):"
		cat "$js.out" 2>/dev/null
	} >>"$ROW_DIR/recovery.log"
	meta recovered "$ok"
	ROW_RECOVERED=$ok
	log "row $1: recovery: link A ports ACTIVE and a new pingpong on rxe0 works: $ok"
}

# cm_check NAME GUEST PORT: a new rdma_cm connection over link A into
# GUEST (an rping server there, three pings from the other guest); 0 when
# it works. Its output goes to the row's recovery.log.
cm_check() {
	local g=$2 o js rc=0
	o=g$((3 - ${g#g}))
	js=$(job_submit "$g" "$1-cm-server" 30 "timeout 25 rping -s -a 10.77.0.${g#g} -p $3 -C 3")
	wait_for 10 test -e "$js.run" || true
	sleep 2
	gexec "$o" 25 "timeout 20 rping -c -a 10.77.0.${g#g} -p $3 -C 3 -v" >>"$ROW_DIR/recovery.log" 2>&1 || rc=1
	job_wait "$js" 5 || { job_kill "$js"; rc=1; }
	return $rc
}

# row_cm NAME GUEST PORT: after an ip-down cut of GUEST, whether a new
# rdma_cm connection over link A gets into it. The guests' kernel can
# lose its GSI QP's receives in such a cut (docs/LAB.md, "Known
# limits"), and rdma_cm over link A stays broken until rxe0 is a new
# device: then rxe0 is re-created there (rxe_recreate, ibpathd restarted
# around it) and the check runs again, so the rows after it start with a
# working rdma_cm. Needs rping (rdmacm-utils) in the guests.
row_cm() {
	local g=$2 st fix=""
	if ! gexec "$g" 5 "command -v rping" >/dev/null 2>&1; then
		meta cm_after_cut n/a
		return 0
	fi
	if cm_check "$1" "$g" $(($3 + 1)); then
		st=ok
	else
		st=broken fix="rxe0 re-created in $g: still broken"
		if gexec "$g" 90 "rxe_recreate 0" >>"$ROW_DIR/recovery.log" 2>&1 && cm_check "$1" "$g" $(($3 + 1)); then
			fix="rxe0 re-created in $g: ok"
		fi
		meta cm_fix "$fix"
	fi
	meta cm_after_cut "$st"
	log "row $1: a new rdma_cm connection into $g over link A: $st${fix:+ ($fix)}"
}

# links_suspect RECOVERED CLIENT_RC: whether a row's end calls for a look
# at the links: its recovery check failed, or its client failed (ran out
# its time, or could not connect), with or without a cut.
links_suspect() {
	[ "$1" = no ] || [ "$2" != 0 ]
}

# link_up GUEST NET: whether GUEST reaches the other guest over link NET
# (0 = A, 1 = B) with IP (two pings), below verbs and rdma_cm.
link_up() {
	gexec "$1" 15 "busybox ping -c 2 -W 2 10.77.$2.$((3 - ${1#g}))" >>"$ROW_DIR/recovery.log" 2>&1
}

# links_dead: sets LINKS_DEAD to the links that carry no IP, as " A from
# g1 B from g2" (empty when both links carry IP both ways).
links_dead() {
	local g n
	LINKS_DEAD=""
	for n in 0 1; do
		for g in g1 g2; do
			link_up "$g" "$n" || LINKS_DEAD+=" $([ "$n" = 0 ] && echo A || echo B) from $g"
		done
	done
}

# row_link NAME: after a cut whose recovery check failed, or a client that
# failed, whether links A and B still carry IP both ways. Under
# TCG a guest's virtio-net can stop completing its sends (its tx_packets
# frozen while the qdisc goes on handing it packets; docs/LAB.md, "Known
# limits"): nothing gets over that link from that guest again, verbs,
# rdma_cm or IP, and re-creating the rxe device does not help (deleting it
# while the stuck packets hold its QPs oopsed the guest in
# rxe_skb_tx_dtor). Link B matters as much as link A: it carries the
# programs' TCP connection, the recovery check's and the backup device.
# Then both guests are rebooted, within what is left of QEMU's deadline,
# and their ibpathd started again when the run uses it, so that the rows
# after it run on working links; the meta (links, link_fix) and the
# report say so.
row_link() {
	local dead left now started
	links_dead
	dead=$LINKS_DEAD
	if [ -z "$dead" ]; then
		meta links ok
		return 0
	fi
	meta links "dead:$dead"
	# the guests' QEMU was started with LAB_DEADLINE: the new ones get what is left of it
	# (one reading of the clock: a guest that never started has all of it)
	now=$(date +%s)
	started=$(stat -c %Y "$LAB_RUN/g1.pid" 2>/dev/null || echo "$now")
	left=$((LAB_DEADLINE - now + started))
	if [ "$left" -lt 120 ]; then
		meta link_fix "not rebooted: $left s of QEMU's deadline left"
		log "row $1: no IP over link$dead after the row; $left s of QEMU's deadline left: guests not rebooted"
		return 1
	fi
	log "row $1: no IP over link$dead after the row; rebooting both guests"
	vm_stop >>"$ROW_DIR/recovery.log" 2>&1
	if LAB_DEADLINE=$left vm_boot >>"$ROW_DIR/recovery.log" 2>&1 && rows_daemons >>"$ROW_DIR/recovery.log" 2>&1 &&
		links_dead && [ -z "$LINKS_DEAD" ]; then
		meta link_fix "guests rebooted: ok"
	else
		meta link_fix "guests rebooted: still dead"
	fi
	log "row $1: $(grep '^link_fix=' "$ROW_DIR/meta" | cut -d= -f2-)"
}

# row_again PROG SHIM CUT PORT: the row just run (ROW_DIR) once more, as
# PROG.SHIM.CUT.again, when a link below verbs was found dead at its end
# and the reboot brought it back: the lab failed under the row, which says
# nothing of the program or the shim. Only a row that must pass (no cut,
# or a cut under the shim) is run again, once, within the budget. The
# first run's meta names its retry (again) when the retry ran; the report
# then shows the first run in lower case and judges the retry. A retry
# the budget leaves out (again_skipped, its reason) leaves the row
# unjudged: the report lists it as such, and it fails nothing.
row_again() {
	local first=$ROW_DIR
	grep -qx 'link_fix=guests rebooted: ok' "$first/meta" 2>/dev/null || return 0
	[ "$3" = none ] || [ "$2" != off ] || return 0
	log "row $1.$2.$3: the lab's links failed under it: running it once more"
	row_run "$1" "$2" "$3" "$4" again
	if grep -qx 'status=SKIP' "$ROW_DIR/meta"; then
		# the retry did not fit in the budget: the first run is not
		# judged either (the report lists it, with the reason)
		echo "again_skipped=$(sed -n 's/^reason=//p' "$ROW_DIR/meta")" >>"$first/meta"
	else
		echo "again=$(basename "$ROW_DIR")" >>"$first/meta"
	fi
}

# rows_daemons: start ibpathd in both guests when the run uses it
# (ROWS_DAEMONS=yes; rows_run decides); 0 when it started or is not used.
rows_daemons() {
	local g rc=0
	[ "${ROWS_DAEMONS:-no}" = yes ] || return 0
	for g in g1 g2; do
		gexec "$g" 40 "LAB_DAEMON_ARGS=$(printf %q "${LAB_DAEMON_ARGS:-}") bash \$LAB_REPO/lab/guest/daemon.sh start" |
			sed "s/^/$g: /" || rc=1
	done
	return $rc
}

# rows_plan: the rows this run takes, one "prog shim cut port" line each,
# in the order they run. LAB_ROW_NAMES (row names separated by blanks)
# gives them exactly, in its order; otherwise LAB_ROWS (a regexp over row
# names, default every row) picks them from LAB_ROW_LIST in its order. A
# row keeps its port whichever way it is picked.
rows_plan() {
	local prog cut shim port=18700 all="" n line
	while read -r prog cut; do
		[ -n "$prog" ] || continue
		for shim in off on sb; do
			port=$((port + 2))
			all+="$prog $shim $cut $port"$'\n'
		done
	done <<<"$LAB_ROW_LIST"
	if [ -n "${LAB_ROW_NAMES:-}" ]; then
		for n in $LAB_ROW_NAMES; do
			line=$(awk -v n="$n" '$1 "." $2 "." $3 == n' <<<"$all")
			if [ -z "$line" ] || [[ "$n" == ibpathd.off.* ]] || [[ "$n" == *.off.drain-* ]] || [[ "$n" == *.off.loss-* ]] || { [[ "$n" == *.flap2-* || "$n" == *.flap3-* || "$n" == *-r3.* ]] && [[ "$n" != *.sb.* ]]; }; then
				log "LAB_ROW_NAMES: no row named '$n' (names are program.off|on|sb.cut, e.g. pingpong.on.setlink-g1; the programs and cuts are LAB_ROW_LIST's in lab/lib/rows.sh)"
				return 2
			fi
			echo "$line"
		done
		return 0
	fi
	while read -r prog shim cut port; do
		[ -n "$prog" ] || continue
		# sb (the switch back named) runs only when LAB_ROWS names it,
		# but for a drain, whose undrain is what brings the QPs home, a
		# loss, whose end is (once the port is healthy again), a
		# flap2 cut, whose second pull is what it is for, and a -r3
		# program, whose paired resets are (the last two run in that arm
		# alone)
		if [ "$shim" = sb ] && { [ "$cut" = none ] || { [ -z "${LAB_ROWS:-}" ] && [[ "$cut" != drain-* && "$cut" != loss-* && "$cut" != flap2-* && "$cut" != flap3-* && "$prog" != *-r3 ]]; }; }; then
			continue
		fi
		if { [[ "$cut" == flap2-* || "$cut" == flap3-* ]] || [[ "$prog" == *-r3 ]]; } && [ "$shim" != sb ]; then continue; fi
		[[ "$prog.$shim.$cut" =~ ${LAB_ROWS:-.} ]] || continue
		# the daemon row runs its pingpong under the shim itself
		[ "$prog" = ibpathd ] && [ "$shim" = off ] && continue
		# a drain acts only through the shim, and so does a port found
		# degraded (a loss row)
		if [[ "$cut" == drain-* || "$cut" == loss-* ]] && [ "$shim" = off ]; then continue; fi
		echo "$prog $shim $cut $port"
	done <<<"$all"
}

# budget_check NEED: 0 when LAB_BUDGET is unset or at least NEED seconds of
# it are left; otherwise sets BUDGET_LEFT (whole seconds) and returns 1.
budget_check() {
	[ -n "${LAB_BUDGET:-}" ] || return 0
	BUDGET_LEFT=$(printf '%.0f' "$(echo "$ROWS_T0 + $LAB_BUDGET - $(now)" | bc)")
	[ "$BUDGET_LEFT" -ge "$1" ]
}

rows_run() {
	local prog cut shim g port t0 rc=0
	t0=$(now)
	ROWS_T0=$t0
	if [ -n "${LAB_BUDGET:-}" ] && ! [[ "$LAB_BUDGET" =~ ^[1-9][0-9]*$ ]]; then
		log "LAB_BUDGET must be a whole number of seconds, not '$LAB_BUDGET'"
		return 2
	fi
	if ! [[ "$LAB_STUCK_LEAD" =~ ^[0-9]+$ ]] || [ "$LAB_STUCK_LEAD" -gt 40 ]; then
		log "LAB_STUCK_LEAD must be a whole number of seconds from 0 to 40, not '$LAB_STUCK_LEAD'"
		return 2
	fi
	rm -rf "$LAB_OUT"
	mkdir -p "$LAB_OUT/rows"
	cp "$LAB_BUILD/status" "$LAB_OUT/build-status" 2>/dev/null || true
	{
		echo "kernel=$(cat "$LAB_BUILD/kver" 2>/dev/null)"
		echo "accel=$LAB_ACCEL"
		echo "rdma_core=$(dpkg-query -W -f '${Version}' rdma-core 2>/dev/null)"
		echo "perftest=$(dpkg-query -W -f '${Version}' perftest 2>/dev/null)"
		echo "openmpi=$(dpkg-query -W -f '${Version}' openmpi-bin 2>/dev/null)"
		echo "qemu=$(dpkg-query -W -f '${Version}' qemu-system-x86 2>/dev/null)"
		echo "commit=$(git -C "$LAB_REPO" rev-parse --short HEAD 2>/dev/null)"
		echo "link_$(cat "$LAB_RUN/link-rcvbuf" 2>/dev/null || echo "rcvbuf=unknown")"
		cat "$LAB_RUN/qemu-nice" 2>/dev/null || echo "qemu_nice=unknown"
		echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	} >"$LAB_OUT/env"
	local plan
	plan=$(rows_plan) || return 2
	# shim rows attach to an ibpathd in each guest (their layer-2 backups)
	local daemons=no
	ROWS_DAEMONS=no
	if awk '$1 != "ibpathd" && $2 != "off"' <<<"$plan" | grep -q . &&
		[ "$(build_status daemon)" = ok ] && [ "$(build_status shim)" = ok ]; then
		ROWS_DAEMONS=yes
		daemons=yes
		rows_daemons || daemons=failed
		log "rows: ibpathd in both guests for the shim rows: $daemons"
	fi
	echo "daemons=$daemons" >>"$LAB_OUT/env"
	while read -r prog shim cut port; do
		[ -n "$prog" ] || continue
		row_run "$prog" "$shim" "$cut" "$port"
		row_again "$prog" "$shim" "$cut" "$port"
	done <<<"$plan"
	# the repetitions' ports come after every planned row's
	port=$((18700 + 6 * $(grep -c . <<<"$LAB_ROW_LIST")))
	# more samples for the with/without ratios: TCG timing is noisy. The
	# order of the arms turns by one each repetition (off,on then on,off),
	# so that a drift within a pair does not lean to one side; the report
	# takes the median of the pairs' ratios. LAB_PERF_CONTROL=1 adds the
	# arm "ctl", the same program again without the shim: its ratio to off
	# is what the lab reads when nothing changes.
	local rep arms=(off on) i n
	[ "${LAB_PERF_CONTROL:-0}" = 1 ] && arms=(off on ctl)
	n=${#arms[@]}
	for ((rep = 1; rep <= LAB_PERF_REPS; rep++)); do
		for prog in write_lat write_bw; do
			for ((i = 0; i < n; i++)); do
				shim=${arms[$(((rep - 1 + i) % n))]}
				# the first repetition of off and on ran with the row list
				[ "$rep" = 1 ] && [ "$shim" != ctl ] && continue
				port=$((port + 2))
				if [ -n "${LAB_ROW_NAMES:-}" ]; then
					# the control arm repeats with the off row
					[[ " $LAB_ROW_NAMES " == *" $prog.${shim/ctl/off}.none "* ]] || continue
				else
					[[ "$prog.$shim.none" =~ ${LAB_ROWS:-.} ]] || continue
				fi
				row_run "$prog" "$shim" none "$port" "$rep"
			done
		done
	done
	if [ "$daemons" != no ]; then
		for g in g1 g2; do
			gexec "$g" 10 "bash \$LAB_REPO/lab/guest/daemon.sh stop" >/dev/null || true
			cp "$LAB_RUN/ibpathd-bg-$g.log" "$LAB_OUT/" 2>/dev/null || true
		done
	fi
	log "rows: all done in $(elapsed "$t0") s${LAB_BUDGET:+ (budget $LAB_BUDGET s)}"
	python3 "$LAB_REPO/lab/report.py" "$LAB_OUT" || rc=$?
	return $rc
}
