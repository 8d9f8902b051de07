#!/bin/bash
# lab/guest/ibpathd.sh server|client PORT: the lab's ibpathd row, run in
# g2 (server) and g1 (client). Each guest runs ibpathd on its real rxe
# devices (fabric hardware, found through sysfs), the two replicating over
# link B with a cluster key; a pingpong on rxe0 runs under the shim, which
# attaches to the local ibpathd. The client checks, through the ibpath
# CLI, what an operator would: the fabric and devices, the peer, the
# pingpong's QP with its owner and layer, a relayed migrate refused with
# the reason, and the port going down and up with eth0. It prints
# "CHECK ok|FAIL ..." lines and "IBPATHD_CHECK ok=N fail=M"; exit 0 when
# nothing failed.
set -uo pipefail
role=$1 port=$2
W=/tmp/ibpathd-lab
mkdir -p "$W"
sock=$W/ibpathd.sock
key=$W/cluster.key
printf '%s\n' 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff >"$key"
chmod 600 "$key"
done_flag=$LAB_RUN/ibpathd-row.$port.done
shim=("LD_PRELOAD=$LAB_BUILD/libibpath.so" "IBPATH_SOCKET=$sock" IBPATH_LOG=debug)

start_daemon() { # name addr [join]
	NODE=$1
	"$LAB_BUILD/ibpathd" --fabric hardware --node "$1" --socket "$sock" --state-dir "$W/state" \
		--gossip-bind "$2:7946" ${3:+--join "$3:7946"} --cluster-key-file "$key" --dbus off \
		--port-poll 200ms --anti-entropy 1s --log-level debug --config /dev/null >"$LAB_RUN/ibpathd-$1.log" 2>&1 &
	DPID=$!
	for _ in $(seq 1 100); do
		"$LAB_BUILD/ibpath" --socket "$sock" status >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "ibpathd did not serve within 10 s:"
	cat "$LAB_RUN/ibpathd-$NODE.log"
	return 1
}

stop_daemon() {
	kill "$DPID" 2>/dev/null
	wait "$DPID" 2>/dev/null
	echo "--- ibpathd log ($role)"
	cat "$LAB_RUN/ibpathd-$NODE.log"
}

if [ "$role" = server ]; then
	start_daemon g2 10.77.1.2 || exit 1
	env "${shim[@]}" ibv_rc_pingpong -d rxe0 -g 1 -c -n 6000 -p "$port"
	echo "pingpong server rc=$?"
	"$LAB_BUILD/ibpath" --socket "$sock" store qps
	# keep serving (the peer checks replication and port events) until the client is done
	for _ in $(seq 1 1800); do [ -e "$done_flag" ] && break; sleep 0.1; done
	stop_daemon
	exit 0
fi

ok=0 fail=0
check() { # description, then a command that must succeed
	local d=$1
	shift
	if "$@"; then ok=$((ok + 1)); echo "CHECK ok $d"; else fail=$((fail + 1)); echo "CHECK FAIL $d"; fi
}
status_json() { "$LAB_BUILD/ibpath" --socket "$sock" --timeout 5s --json status; }
# jq is not in the guests; python3 (the host's /usr) reads the JSON.
q() { status_json | python3 -c "import json,sys; n=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
eventually() { # seconds, then a command
	local end=$((SECONDS + $1))
	shift
	while [ $SECONDS -lt $end ]; do "$@" && return 0; sleep 0.1; done
	return 1
}

start_daemon g1 10.77.1.1 10.77.1.2 || { echo "IBPATHD_CHECK ok=0 fail=1"; touch "$done_flag"; exit 1; }
check "fabric is hardware, with rxe0 and rxe1 found in sysfs" \
	q 'n["fabric"]["kind"]=="hardware" and sorted(h["name"] for h in n["hcas"])==["rxe0","rxe1"]'
check "rxe0 port 1 is ACTIVE, Ethernet, without APM" \
	q 'any(h["name"]=="rxe0" and not h["apm"] and h["ports"][0]["state"]=="ACTIVE" and h["ports"][0]["link_layer"]=="Ethernet" for h in n["hcas"])'
check "the peer g2 is alive (replication keyed over link B)" \
	eventually 15 q 'n["replication"]["mode"]=="keyed" and any(p["name"]=="g2" and p["state"]=="alive" for p in n["peers"])'
sleep 1
env "${shim[@]}" ibv_rc_pingpong -d rxe0 -g 1 -c -n 6000 -p "$port" 10.77.1.2 >"$W/pp.out" 2>&1 &
PP=$!
check "the pingpong's QP is listed with its owner pid, RoCE as the reason layer 1 cannot protect it" \
	eventually 20 q "any(x['owner_pid']==$PP and x['device']=='rxe0' and x['apm']=='unsupported' and 'RoCE' in x['reason'] for x in n['qps'])"
"$LAB_BUILD/ibpath" --socket "$sock" store qps
check "layer 2 mirrored the QP on rxe1 and connected its backup to the peer's" \
	eventually 20 q "any(x['owner_pid']==$PP and x.get('backup',{}).get('device')=='rxe1' and x['backup'].get('connected') for x in n['qps'])"
"$LAB_BUILD/ibpath" --socket "$sock" status | sed -n '/^QPs:/,/^$/p'
check "the store holds this node's backup QP entry and the peer's, pushed by g2's ibpathd" \
	eventually 10 bash -c "'$LAB_BUILD/ibpath' --socket '$sock' --json store qps | python3 -c \"import json,sys; e=json.load(sys.stdin); o=set(x['owner'].split('/')[0] for x in e if x['backup_device']=='rxe1'); sys.exit(0 if {'g1','g2'} <= o else 1)\""
"$LAB_BUILD/ibpath" --socket "$sock" store qps
qpn=$(status_json | python3 -c "import json,sys; n=json.load(sys.stdin); print(next((hex(x['qpn']) for x in n['qps'] if x['owner_pid']==$PP), ''))")
if [ -n "$qpn" ]; then
	"$LAB_BUILD/ibpath" --socket "$sock" migrate rxe0 "$qpn" >"$W/migrate.out" 2>&1
	rc=$?
	cat "$W/migrate.out"
	check "a relayed migrate of that QP is refused by the shim with the reason (exit 5)" \
		bash -c "[ $rc = 5 ] && grep -q 'RoCE has no automatic path migration' '$W/migrate.out'"
else
	check "a relayed migrate of that QP is refused by the shim (no QP to migrate)" false
fi
wait $PP
pprc=$?
cat "$W/pp.out"
check "the pingpong under the shim finished (rc $pprc)" test "$pprc" = 0
check "its QP and owner are gone after it ended" \
	eventually 10 q "not any(x['owner_pid']==$PP for x in n['qps']) and not any(o['pid']==$PP for o in n['owners'])"
ip link set eth0 down
check "ibpathd sees rxe0 port 1 go DOWN" eventually 10 q 'any(h["name"]=="rxe0" and h["ports"][0]["state"]=="DOWN" for h in n["hcas"])'
check "the metrics say so" eventually 5 bash -c "'$LAB_BUILD/ibpath' --socket '$sock' metrics | grep -q 'ibpath_port_up{device=\"rxe0\",port=\"1\"} 0'"
ip link set eth0 up
check "and back ACTIVE" eventually 15 q 'any(h["name"]=="rxe0" and h["ports"][0]["state"]=="ACTIVE" for h in n["hcas"])'
check "PortStateChanged logged" grep -q "kind=PortStateChanged device=rxe0 port=1" "$LAB_RUN/ibpathd-g1.log"
"$LAB_BUILD/ibpath" --socket "$sock" status
touch "$done_flag"
stop_daemon
echo "IBPATHD_CHECK ok=$ok fail=$fail"
[ "$fail" = 0 ]
