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
	host, name string
	hca        *sim.HCA
	ctx        verbs.Context
	pd         verbs.PD
	cq         verbs.CQ
	eps        []*endpoint
}

func (d *device) String() string { return d.host + "/" + d.name }

func openDevice(f *sim.Fabric, host, name string) (*device, error) {
	h := f.Host(host)
	if h == nil || h.HCA(name) == nil {
		return nil, fmt.Errorf("no device %s/%s in the fabric", host, name)
	}
	d := &device{host: host, name: name, hca: h.HCA(name)}
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
	tag    byte  // makes each direction's data pattern distinct
	t      traffic
}

func (e *endpoint) String() string { return fmt.Sprintf("%s QP %s", e.dev, e.qpName) }

func newEndpoint(d *device, qpName string, tag byte) (*endpoint, error) {
	e := &endpoint{qpName: qpName, dev: d, tag: tag, buf: make([]byte, 2*nSlots*slotSize)}
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
// port n of b's HCA (LID-routed, path bits 0).
func pathTo(b *endpoint, n uint8, local uint8) (verbs.AHAttr, error) {
	pa, err := b.dev.ctx.QueryPort(n)
	if err != nil {
		return verbs.AHAttr{}, fmt.Errorf("ibv_query_port %s port %d: %w", b.dev, n, err)
	}
	return verbs.AHAttr{DLID: pa.LID, PortNum: local}, nil
}

// connect takes a's QP from RESET to RTS towards b's QP, on port n of both.
func connect(a, b *endpoint, n uint8) error {
	init := verbs.QPAttr{QPState: verbs.QPSInit, PKeyIndex: 0, PortNum: n, QPAccessFlags: rcAccess}
	if err := a.qp.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("ibv_modify_qp RESET->INIT on %v: %w", a, err)
	}
	ah, err := pathTo(b, n, n)
	if err != nil {
		return err
	}
	rtr := verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: ah, PathMTU: rcMTU, DestQPN: b.qp.QPN(),
		RQPSN: rcPSN, MaxDestRdAtomic: 1, MinRNRTimer: rcMinRNR}
	if err := a.qp.Modify(&rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("ibv_modify_qp INIT->RTR on %v: %w", a, err)
	}
	rts := verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: rcPSN, Timeout: rcTimeout, RetryCnt: rcRetryCnt,
		RNRRetry: rcRNRRetry, MaxRdAtomic: 1}
	if err := a.qp.Modify(&rts, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("ibv_modify_qp RTR->RTS on %v: %w", a, err)
	}
	a.peer, a.port = b, n
	return nil
}

// loadAlt loads an alternate path on port alt of both HCAs into a's QP and
// asks the HCA to arm it (REARM); the HCA reports ARMED by itself later.
func loadAlt(a, b *endpoint, alt uint8) error {
	ah, err := pathTo(b, alt, alt)
	if err != nil {
		return err
	}
	attr := verbs.QPAttr{AltAHAttr: ah, AltPortNum: alt, AltPKeyIndex: 0, AltTimeout: rcTimeout,
		PathMigState: verbs.MigRearm}
	if err := a.qp.Modify(&attr, verbs.QPAttrAltPath|verbs.QPAttrPathMigState); err != nil {
		return fmt.Errorf("ibv_modify_qp (alt path, REARM) on %v: %w", a, err)
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

// waitArmed polls both QPs with Query until each reports ARMED (Linux
// verbs has no ARMED event), calling report once per side.
func waitArmed(f *sim.Fabric, eps []*endpoint, report func(*endpoint, verbs.QPAttr)) error {
	done := make([]bool, len(eps))
	left := len(eps)
	for deadline := f.Now() + 10*time.Millisecond; left > 0; f.RunFor(5 * time.Microsecond) {
		if f.Now() > deadline {
			return fmt.Errorf("alternate path not ARMED after 10 ms")
		}
		for i, e := range eps {
			if done[i] {
				continue
			}
			attr, err := queryPath(e)
			if err != nil {
				return err
			}
			if attr.PathMigState == verbs.MigArmed {
				done[i] = true
				left--
				report(e, attr)
			}
		}
	}
	return nil
}
