package demo

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// RC settings of both QPs: realistic values for a production cluster.
const (
	rcTimeout  = 14 // local ACK timeout 4.096 us * 2^14 = 67.1 ms
	rcRetryCnt = 3
	rcRNRRetry = 7  // infinite RNR retries
	rcMinRNR   = 12 // 0.64 ms
	rcMTU      = verbs.MTU2048
	rcPSN      = 0x1000
	rcAccess   = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
)

// device is one open HCA: a context, a PD and the CQ its QPs share.
type device struct {
	host *host
	name string
	hca  *sim.HCA
	ctx  verbs.Context
	pd   verbs.PD
	cq   verbs.CQ
	eps  []*endpoint
}

func (d *device) String() string { return d.host.name + "/" + d.name }

func openDevice(f *sim.Fabric, hs *host, name string) (*device, error) {
	h := f.Host(hs.name)
	if h == nil || h.HCA(name) == nil {
		return nil, fmt.Errorf("no device %s/%s in the fabric", hs.name, name)
	}
	d := &device{host: hs, name: name, hca: h.HCA(name)}
	var err error
	if d.ctx, err = h.Open(name); err != nil {
		return nil, fmt.Errorf("ibv_open_device %s: %w", d, err)
	}
	if d.pd, err = d.ctx.AllocPD(); err != nil {
		return nil, fmt.Errorf("ibv_alloc_pd on %s: %w", d, err)
	}
	if d.cq, err = d.ctx.CreateCQ(1024, nil, 0); err != nil {
		return nil, fmt.Errorf("ibv_create_cq on %s: %w", d, err)
	}
	return d, nil
}

// endpoint is one side of an RC connection with its buffer: source slots
// in the first half, sink slots (written by the peer) in the second.
type endpoint struct {
	qpName string
	dev    *device
	qp     verbs.QP
	buf    []byte
	mr     verbs.MR
	peer   *endpoint
	port   uint8 // primary port as last seen
	// connMig and connAlt are the QP's path_mig_state and alternate port
	// right after the application's connect (see recordConnected).
	connMig verbs.MigState
	connAlt uint8
	// lastHWMig is when layer 1 last saw this side's HCA migrate by itself.
	lastHWMig time.Duration
	tag       byte // makes each direction's data pattern distinct
	// awaitFrom is the first seq posted while layer 1 waited for the peer
	// to follow a migration it made (-1: not waiting).
	awaitFrom int64
	// l2 is layer 2 of a protected QP (nil: the application uses the QP
	// and CQ directly).
	l2 *protection
	t  traffic
}

func (e *endpoint) String() string { return fmt.Sprintf("%s QP %s", e.dev, e.qpName) }

func newEndpoint(d *device, qpName string, tag byte) (*endpoint, error) {
	e := &endpoint{qpName: qpName, dev: d, tag: tag, buf: make([]byte, 2*nSlots*slotSize), awaitFrom: -1}
	var err error
	e.qp, err = d.pd.CreateQP(verbs.QPInitAttr{SendCQ: d.cq, RecvCQ: d.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, fmt.Errorf("ibv_create_qp on %s: %w", d, err)
	}
	if e.mr, err = d.pd.RegMR(e.buf, rcAccess); err != nil {
		return nil, fmt.Errorf("ibv_reg_mr on %s: %w", d, err)
	}
	d.eps = append(d.eps, e)
	return e, nil
}

// pathTo is the address vector of a path leaving the local port towards
// port n of b's HCA: LID-routed with path bits 0 on InfiniBand; on RoCE
// global, to the peer port's RoCEv2 GID (index 1), from ours.
func pathTo(b *endpoint, n uint8, local uint8) (verbs.AHAttr, error) {
	lid, gid, err := portAddr(b.dev, n)
	if err != nil {
		return verbs.AHAttr{}, err
	}
	return ahTo(lid, gid, local), nil
}

// portAddr is how peers address port n of d: its LID on InfiniBand, its
// RoCEv2 GID (and LID 0) on Ethernet.
func portAddr(d *device, n uint8) (uint16, verbs.GID, error) {
	pa, err := d.ctx.QueryPort(n)
	if err != nil {
		return 0, verbs.GID{}, fmt.Errorf("ibv_query_port %s port %d: %w", d, n, err)
	}
	if pa.LinkLayer != verbs.LinkLayerEthernet {
		return pa.LID, verbs.GID{}, nil
	}
	g, err := d.ctx.QueryGID(n, roceGIDIndex)
	if err != nil {
		return 0, verbs.GID{}, fmt.Errorf("ibv_query_gid %s port %d index %d: %w", d, n, roceGIDIndex, err)
	}
	return 0, g, nil
}

// ahTo is the address vector from the local port to a port addressed as
// portAddr returns it: LID-routed, or global when there is no LID (RoCE).
func ahTo(lid uint16, gid verbs.GID, local uint8) verbs.AHAttr {
	if lid == 0 {
		return verbs.AHAttr{IsGlobal: true, PortNum: local,
			GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: roceGIDIndex, HopLimit: 64}}
	}
	return verbs.AHAttr{DLID: lid, PortNum: local}
}

// connect takes a's QP from RESET to RTS towards b's QP, on port n of
// both, with the application's own three ibv_modify_qp calls, made through
// the host's layer-1 manager as the shim makes them: apm.Manager.ModifyQP
// adds the alternate path at INIT->RTR and REARM at RTR->RTS.
func connect(a, b *endpoint, n uint8) error {
	mod := func(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
		return a.dev.host.mgr.ModifyQP(a.dev.ctx, a.qp, attr, mask)
	}
	ah, err := pathTo(b, n, n)
	if err != nil {
		return err
	}
	if err := toRTS(mod, a.String(), ah, b.qp.QPN(), n); err != nil {
		return err
	}
	a.peer, a.port = b, n
	return nil
}

// toRTS is the three ibv_modify_qp calls of an RC connect, made with mod,
// with the demo's RC settings: the QP leaves port n along ah towards the
// QP numbered dqpn.
func toRTS(mod func(*verbs.QPAttr, verbs.QPAttrMask) error, who string, ah verbs.AHAttr, dqpn uint32, n uint8) error {
	init := verbs.QPAttr{QPState: verbs.QPSInit, PKeyIndex: 0, PortNum: n, QPAccessFlags: rcAccess}
	if err := mod(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("ibv_modify_qp RESET->INIT on %s: %w", who, err)
	}
	rtr := verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: ah, PathMTU: rcMTU, DestQPN: dqpn,
		RQPSN: rcPSN, MaxDestRdAtomic: 1, MinRNRTimer: rcMinRNR}
	if err := mod(&rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("ibv_modify_qp INIT->RTR on %s: %w", who, err)
	}
	rts := verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: rcPSN, Timeout: rcTimeout, RetryCnt: rcRetryCnt,
		RNRRetry: rcRNRRetry, MaxRdAtomic: 1}
	if err := mod(&rts, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("ibv_modify_qp RTR->RTS on %s: %w", who, err)
	}
	return nil
}

// queryPath reads the QP's state, migration state and primary port.
func queryPath(e *endpoint) (verbs.QPAttr, error) {
	attr, _, err := e.qp.Query(verbs.QPAttrState | verbs.QPAttrPathMigState | verbs.QPAttrPort)
	if err != nil {
		return attr, fmt.Errorf("ibv_query_qp on %v: %w", e, err)
	}
	return attr, nil
}
