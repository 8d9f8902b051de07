package crossnic

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// Shadow mirrors the application's control verbs on a backup HCA: for each
// PD, MR and RC QP created on the default device it creates the matching
// resources on the backup device, publishes the mappings in the Directory,
// and connects the backup QP once the peer's backup QP is known. It never
// waits for the peer: a QP whose remote attributes are not published yet
// is skipped and picked up by a later Scan, so two hosts setting up at the
// same time cannot deadlock. It is meant to run off the application's
// critical path (a background loop calls Scan).
type Shadow struct {
	dir     Directory
	def     verbs.Context
	bak     verbs.Context
	defDesc pathsel.HCA
	bakDesc pathsel.HCA
	bakPort uint8
	pds     map[verbs.PD]verbs.PD
	lkeys   map[uint32]uint32
	bakMRs  map[uint32]verbs.MR // by the default MR's lkey
	qps     map[verbs.QP]*shadowQP
	order   []*shadowQP
	ch      verbs.CompChannel       // of the backup CQs; nil: none
	byCQ    map[verbs.CQ]*shadowQP  // by backup CQ
	srqs    map[verbs.SRQ]verbs.SRQ // the application's SRQs -> their backups
	// mailboxes: each QP not on an SRQ gets a mailbox (SetMailboxes)
	mailboxes bool
}

type shadowQP struct {
	def, bak   verbs.QP
	bakCQ      verbs.CQ
	bakRecvCQ  verbs.CQ    // nil: bakCQ serves both queues
	ctrlPosted bool        // the control receive is on the backup QP (or its SRQ)
	cap        verbs.QPCap // of the default QP
	sigAll     bool
	local      Endpoint
	remote     Endpoint
	remoteSet  bool
	connected  bool
	// rtsWaited: a scan found the default QP at RTR and put the backup's
	// connect off once (scanQP)
	rtsWaited  bool
	remotePort pathsel.Port // identity of the peer's default port, for its rkeys
	attr       verbs.QPAttr // what the backup was connected with (INIT, RTR and RTS fields)
	srq        verbs.SRQ    // the application's SRQ the QP receives through (nil: none)
	// mbox: the QP's mailbox (nil: none), published with the backup and
	// handed to every Conn the shadow builds for the QP
	mbox *mailbox
}

// NewShadow prepares shadow resources of def on bak (chosen with
// pathsel.ChooseBackup): the backup's first ACTIVE port carries them.
func NewShadow(def, bak verbs.Context, dir Directory) (*Shadow, error) {
	dd, err := pathsel.Describe(def)
	if err != nil {
		return nil, fmt.Errorf("crossnic: shadow: %w", err)
	}
	bd, err := pathsel.Describe(bak)
	if err != nil {
		return nil, fmt.Errorf("crossnic: shadow: %w", err)
	}
	s := &Shadow{dir: dir, def: def, bak: bak, defDesc: dd, bakDesc: bd, pds: map[verbs.PD]verbs.PD{},
		lkeys: map[uint32]uint32{}, bakMRs: map[uint32]verbs.MR{}, qps: map[verbs.QP]*shadowQP{}, byCQ: map[verbs.CQ]*shadowQP{},
		srqs: map[verbs.SRQ]verbs.SRQ{}}
	for _, p := range bd.Ports {
		if p.Active() {
			s.bakPort = p.Num
			break
		}
	}
	if s.bakPort == 0 {
		return nil, fmt.Errorf("crossnic: shadow on %s: no ACTIVE port", bd.Name)
	}
	return s, nil
}

// portID is how peers name a port: its LID on InfiniBand, its RoCEv2 GID
// (index 1 when there is one) on Ethernet.
func portID(p pathsel.Port) (uint16, verbs.GID) {
	if p.LinkLayer == verbs.LinkLayerEthernet && len(p.GIDs) == 0 {
		return 0, verbs.GID{} // no address: nothing a peer could name
	}
	if p.LinkLayer == verbs.LinkLayerEthernet {
		g := p.GIDs[len(p.GIDs)-1]
		return 0, g
	}
	return p.LID, verbs.GID{}
}

func (s *Shadow) pd(defPD verbs.PD) (verbs.PD, error) {
	if b, ok := s.pds[defPD]; ok {
		return b, nil
	}
	b, err := s.bak.AllocPD()
	if err != nil {
		return nil, fmt.Errorf("crossnic: shadow ibv_alloc_pd on %s: %w", s.bakDesc.Name, err)
	}
	s.pds[defPD] = b
	return b, nil
}

// RegMR mirrors ibv_reg_mr: the same memory is registered on the backup,
// its lkey mapping kept and its rkey published for every default port.
func (s *Shadow) RegMR(defPD verbs.PD, defMR verbs.MR, buf []byte) error {
	bpd, err := s.pd(defPD)
	if err != nil {
		return err
	}
	bmr, err := bpd.RegMR(buf, defMR.Access())
	if err != nil {
		return fmt.Errorf("crossnic: shadow ibv_reg_mr on %s: %w", s.bakDesc.Name, err)
	}
	return s.adoptMR(defMR, bmr)
}

// RegDmabufMR mirrors ibv_reg_dmabuf_mr of the default device on the
// backup device: the same dma-buf (fd, which must still be open: the
// application's call has not returned) at the same offset, length and
// iova, so a replayed WR's SGEs and the peer's RDMA to the published
// rkey reach the same device memory through the backup. A backup PD
// that cannot register dma-bufs is an error (the region stays
// unmirrored).
func (s *Shadow) RegDmabufMR(defPD verbs.PD, defMR verbs.MR, offset uint64, fd int) error {
	bpd, err := s.pd(defPD)
	if err != nil {
		return err
	}
	reg, ok := bpd.(verbs.DmabufRegistrar)
	if !ok {
		return fmt.Errorf("crossnic: shadow ibv_reg_dmabuf_mr on %s: %w", s.bakDesc.Name,
			verbs.Errorf("ibv_reg_dmabuf_mr", verbs.EOPNOTSUPP, "the backup device's PD registers no dma-buf memory"))
	}
	bmr, err := reg.RegDmabufMR(offset, defMR.Len(), defMR.Addr(), fd, defMR.Access())
	if err != nil {
		return fmt.Errorf("crossnic: shadow ibv_reg_dmabuf_mr on %s: %w", s.bakDesc.Name, err)
	}
	return s.adoptMR(defMR, bmr)
}

// RegImplicitODP mirrors an implicit on-demand-paging registration of the
// default device (verbs.ImplicitODPRegistrar: the whole address space) on
// the backup device with the same access: a replayed WR's SGEs and the
// peer's RDMA to the published rkey then reach the same addresses through
// the backup, which faults the pages in as the default did. A backup
// device without implicit ODP refuses (EINVAL or EOPNOTSUPP), and the
// region stays unmirrored.
func (s *Shadow) RegImplicitODP(defPD verbs.PD, defMR verbs.MR) error {
	if !verbs.IsImplicitODP(defMR) {
		return fmt.Errorf("crossnic: shadow implicit ODP registration: the region at %#x+%d is not one", defMR.Addr(), defMR.Len())
	}
	bpd, err := s.pd(defPD)
	if err != nil {
		return err
	}
	reg, ok := bpd.(verbs.ImplicitODPRegistrar)
	if !ok {
		return fmt.Errorf("crossnic: shadow implicit ODP registration on %s: %w", s.bakDesc.Name,
			verbs.Errorf("ibv_reg_mr", verbs.EOPNOTSUPP, "the backup device's PD registers no implicit on-demand-paging region"))
	}
	bmr, err := reg.RegImplicitODP(defMR.Access())
	if err != nil {
		return fmt.Errorf("crossnic: shadow implicit ODP registration on %s: %w", s.bakDesc.Name, err)
	}
	return s.adoptMR(defMR, bmr)
}

// remoteAccess is the access that lets a peer name a region by its rkey.
const remoteAccess = verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic

// adoptMR makes bmr, registered on the backup device, the mirror of the
// default region defMR: the same addresses, its lkey mapped for replays
// and, when the peers can reach it, its rkey published for them. A
// local-only region publishes nothing: no peer can name it, and drivers
// may give all such regions one rkey (rdma_rxe gives 0), which would
// put one default key on several backup keys. An MR at another address
// is released and refused.
func (s *Shadow) adoptMR(defMR, bmr verbs.MR) error {
	if bmr.Addr() != defMR.Addr() {
		err := fmt.Errorf("crossnic: shadow MR at %#x, default at %#x: not the same memory", bmr.Addr(), defMR.Addr())
		if derr := bmr.Dereg(); derr != nil {
			err = fmt.Errorf("%w (and its ibv_dereg_mr: %w)", err, derr)
		}
		return err
	}
	s.lkeys[defMR.LKey()] = bmr.LKey()
	s.bakMRs[defMR.LKey()] = bmr
	if defMR.Access()&remoteAccess == 0 {
		return nil
	}
	for _, p := range s.defDesc.Ports {
		lid, gid := portID(p)
		if err := s.dir.PublishMR(MRRef{LID: lid, GID: gid, RKey: defMR.RKey()}, bmr.RKey()); err != nil {
			return err
		}
	}
	return nil
}

// DeregMR mirrors ibv_dereg_mr of the default region with local key
// lkey: its backup registration is released and its lkey mapping
// forgotten. The published rkey mapping stays until the owner's entries
// are removed (a Directory has no removal). An unknown lkey is not an
// error: the region may have been registered before the shadow existed.
func (s *Shadow) DeregMR(lkey uint32) error {
	bmr, ok := s.bakMRs[lkey]
	if !ok {
		return nil
	}
	delete(s.bakMRs, lkey)
	delete(s.lkeys, lkey)
	if err := bmr.Dereg(); err != nil {
		return fmt.Errorf("crossnic: shadow ibv_dereg_mr on %s: %w", s.bakDesc.Name, err)
	}
	return nil
}

// SetMailboxes gives every QP the shadow creates from now on, unless it
// receives through an SRQ, a mailbox on the backup device (128 bytes,
// registered for remote write): its inbox is published with the backup
// QP, the peer's looked up with the peer's, and the Conns the shadow
// builds carry every handshake after the first through it when both
// ends have one (docs/CROSSNIC.md, "The mailbox"). Both ends must agree:
// the purge of the backup follows it.
func (s *Shadow) SetMailboxes(on bool) { s.mailboxes = on }

// SetCompChannel gives the backup CQs created from now on the completion
// channel ch (of the backup device): each is armed (ReqNotify) when its
// backup QP is connected, so a watcher learns from ch that the peer's
// control message arrived even before this side has a Conn for the QP
// (DefaultOf names the QP). Whoever reads ch acknowledges each event and
// arms the CQ again.
func (s *Shadow) SetCompChannel(ch verbs.CompChannel) { s.ch = ch }

// CreateQP mirrors ibv_create_qp: a backup CQ and QP with the same
// capabilities (plus room for ibpath's control WRs), taken to INIT. When
// the application's QP has separate send and receive CQs (init.SendCQ and
// init.RecvCQ set and different) the backup QP has two CQs as well, so
// the completions of each queue can be told apart even when they fail.
func (s *Shadow) CreateQP(defPD verbs.PD, defQP verbs.QP, init verbs.QPInitAttr) error {
	bpd, err := s.pd(defPD)
	if err != nil {
		return err
	}
	c := init.Cap
	c.MaxSendWR += 4
	c.MaxRecvWR += ctrlRecvs + 1
	var bsrq verbs.SRQ
	if init.SRQ != nil {
		if bsrq = s.srqs[init.SRQ]; bsrq == nil {
			return fmt.Errorf("crossnic: shadow: QP %#x receives through an SRQ that has no backup", defQP.QPN())
		}
		a, err := bsrq.Query()
		if err != nil {
			return fmt.Errorf("crossnic: shadow ibv_query_srq on %s: %w", s.bakDesc.Name, err)
		}
		c.MaxRecvWR, c.MaxRecvSGE = a.MaxWR, 0 // what its receive CQ may get
	}
	split := init.SendCQ != nil && init.RecvCQ != nil && init.SendCQ != init.RecvCQ
	n := c.MaxSendWR + c.MaxRecvWR + 1
	if split {
		n = c.MaxSendWR + 1
	}
	cq, err := s.bak.CreateCQ(n, s.ch, 0)
	if err != nil {
		return fmt.Errorf("crossnic: shadow ibv_create_cq on %s: %w", s.bakDesc.Name, err)
	}
	rcq := cq
	if split {
		if rcq, err = s.bak.CreateCQ(c.MaxRecvWR+1, s.ch, 0); err != nil {
			_ = cq.Destroy()
			return fmt.Errorf("crossnic: shadow ibv_create_cq on %s: %w", s.bakDesc.Name, err)
		}
	}
	qp, err := bpd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: rcq, SRQ: bsrq, Cap: c, QPType: verbs.QPTRC, SQSigAll: init.SQSigAll})
	if err != nil {
		if split {
			_ = rcq.Destroy()
		}
		_ = cq.Destroy()
		return fmt.Errorf("crossnic: shadow ibv_create_qp on %s: %w", s.bakDesc.Name, err)
	}
	ia := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: s.bakPort,
		QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	err = qp.Modify(&ia, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	if err != nil {
		return fmt.Errorf("crossnic: shadow QP to INIT: %w", err)
	}
	// On an SRQ, the group's control receive on the backup SRQ serves
	// every QP (CreateSRQ posted it).
	sq := &shadowQP{def: defQP, bak: qp, bakCQ: cq, cap: init.Cap, sigAll: init.SQSigAll, attr: ia, ctrlPosted: bsrq != nil, srq: init.SRQ}
	if s.mailboxes && bsrq == nil {
		if sq.mbox, err = newMailbox(bpd); err != nil {
			_ = qp.Destroy()
			if split {
				_ = rcq.Destroy()
			}
			_ = cq.Destroy()
			return fmt.Errorf("crossnic: shadow: the mailbox on %s: %w", s.bakDesc.Name, err)
		}
	}
	s.byCQ[cq] = sq
	if split {
		sq.bakRecvCQ = rcq
		s.byCQ[rcq] = sq
	}
	s.qps[defQP] = sq
	s.order = append(s.order, sq)
	return nil
}

// DestroyQP releases the backup of defQP (its QP and CQs), which the
// application destroyed; a QP the shadow does not know is not an error.
func (s *Shadow) DestroyQP(defQP verbs.QP) error {
	sq := s.qps[defQP]
	if sq == nil {
		return nil
	}
	delete(s.qps, defQP)
	for i, x := range s.order {
		if x == sq {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	delete(s.byCQ, sq.bakCQ)
	var errs []error
	if err := sq.bak.Destroy(); err != nil {
		errs = append(errs, fmt.Errorf("crossnic: shadow ibv_destroy_qp on %s: %w", s.bakDesc.Name, err))
	}
	if sq.bakRecvCQ != nil {
		delete(s.byCQ, sq.bakRecvCQ)
		if err := sq.bakRecvCQ.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("crossnic: shadow ibv_destroy_cq on %s: %w", s.bakDesc.Name, err))
		}
	}
	if err := sq.bakCQ.Destroy(); err != nil {
		errs = append(errs, fmt.Errorf("crossnic: shadow ibv_destroy_cq on %s: %w", s.bakDesc.Name, err))
	}
	if sq.mbox != nil {
		if err := sq.mbox.release(); err != nil {
			errs = append(errs, fmt.Errorf("crossnic: shadow: release the mailbox on %s: %w", s.bakDesc.Name, err))
		}
	}
	return errors.Join(errs...)
}

// DefaultOf returns the default QP whose backup completes into bakCQ,
// and whether bakCQ is one of the shadow's backup CQs.
func (s *Shadow) DefaultOf(bakCQ verbs.CQ) (verbs.QP, bool) {
	sq := s.byCQ[bakCQ]
	if sq == nil {
		return nil, false
	}
	return sq.def, true
}

// BackupLKey returns the lkey of the backup registration of the default
// region with local key defLKey.
func (s *Shadow) BackupLKey(defLKey uint32) (uint32, bool) {
	k, ok := s.lkeys[defLKey]
	return k, ok
}

// MRAccess is the access of the default region with local key defLKey,
// as its mirror was registered with; false when it has none.
func (s *Shadow) MRAccess(defLKey uint32) (verbs.AccessFlags, bool) {
	m, ok := s.bakMRs[defLKey]
	if !ok {
		return 0, false
	}
	return m.Access(), true
}

// Connected records that the application connected defQP (call it after
// its RTR): the peer's default endpoint is known now. The local mapping is
// published and the backup QP connected if the peer's is known. Only
// defQP's peer is looked up: the others waiting are the scan's (Scan,
// Pending), so a program connecting n QPs makes n lookups, not n²/2.
func (s *Shadow) Connected(defQP verbs.QP) error {
	sq := s.qps[defQP]
	if sq == nil {
		return fmt.Errorf("crossnic: shadow: QP %#x was not created through the shadow", defQP.QPN())
	}
	a, _, err := defQP.Query(verbs.QPAttrAV | verbs.QPAttrDestQPN | verbs.QPAttrPort)
	if err != nil {
		return fmt.Errorf("crossnic: shadow: %w", err)
	}
	lp, ok := s.defDesc.Port(a.PortNum)
	if !ok {
		return fmt.Errorf("crossnic: shadow: default port %d unknown", a.PortNum)
	}
	lid, gid := portID(lp)
	sq.local = Endpoint{LID: lid, GID: gid, QPN: defQP.QPN()}
	if lp.LinkLayer == verbs.LinkLayerEthernet {
		sq.remote = Endpoint{GID: a.AHAttr.GRH.DGID, QPN: a.DestQPN}
		sq.remotePort = pathsel.Port{LinkLayer: verbs.LinkLayerEthernet, GIDs: []verbs.GID{a.AHAttr.GRH.DGID}}
	} else {
		sq.remote = Endpoint{LID: a.AHAttr.DLID, QPN: a.DestQPN}
		sq.remotePort = pathsel.Port{LinkLayer: verbs.LinkLayerInfiniBand, LID: a.AHAttr.DLID}
	}
	sq.remoteSet = true
	bp, _ := s.bakDesc.Port(s.bakPort)
	blid, bgid := portID(bp)
	pub := Backup{Device: s.bakDesc.Name, Port: s.bakPort, LID: blid, GID: bgid, QPN: sq.bak.QPN()}
	if sq.mbox != nil {
		pub.Mailbox = sq.mbox.inbox()
	}
	if err := s.dir.PublishQP(sq.local, pub); err != nil {
		return err
	}
	s.scanQP(sq, s.dir.LookupQP)
	return nil
}

// Scan connects every backup QP whose peer backup is published by now and
// returns how many it connected. Steps that cannot be done yet are skipped.
func (s *Shadow) Scan() int { return s.ScanWith(s.dir.LookupQP) }

// ScanWith is Scan with the peers' backups looked up through lookup
// instead of the directory: a caller that holds a lock around the shadow
// looks the Pending endpoints up without it, then scans with what it
// found.
func (s *Shadow) ScanWith(lookup func(Endpoint) (Backup, bool)) int {
	n := 0
	for _, sq := range s.order {
		if s.scanQP(sq, lookup) {
			n++
		}
	}
	return n
}

// Pending returns the peers' default endpoints whose backups the shadow
// waits for: the QPs connected by the application whose backup is not
// connected yet, in creation order.
func (s *Shadow) Pending() []Endpoint {
	var out []Endpoint
	for _, sq := range s.order {
		if sq.waiting() {
			out = append(out, sq.remote)
		}
	}
	return out
}

// PeerPorts lists, once each and in creation order, the peers' ports of
// the QPs the application connected, as the peers' regions are named
// there (MRRef, RKey 0): the ports whose rkeys a failover translates.
func (s *Shadow) PeerPorts() []MRRef {
	var out []MRRef
	seen := map[MRRef]bool{}
	for _, sq := range s.order {
		if !sq.remoteSet {
			continue
		}
		lid, gid := portID(sq.remotePort)
		if p := (MRRef{LID: lid, GID: gid}); p != (MRRef{}) && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// Waiting reports whether the application connected defQP and its backup
// is not connected yet: a fault now reaches the application.
func (s *Shadow) Waiting(defQP verbs.QP) bool {
	sq := s.qps[defQP]
	return sq != nil && sq.waiting()
}

// waiting: the application connected the QP, its backup is not connected.
func (sq *shadowQP) waiting() bool { return sq.remoteSet && !sq.connected }

// scanQP connects sq's backup when the application connected sq and
// lookup knows the peer's backup; it reports whether it did. A default
// QP still at RTR puts it off once (rtsWaited).
func (s *Shadow) scanQP(sq *shadowQP, lookup func(Endpoint) (Backup, bool)) bool {
	if !sq.waiting() {
		return false
	}
	if !sq.rtsWaited && sq.def.State() == verbs.QPSRTR {
		// The default QP's RTS attributes (ACK timeout, retry counts) are
		// the application's choice, and an RTS QP takes them only on its
		// way from RTR: the backup waits one scan for the application's
		// RTS, which usually follows its RTR at once (the caller scans
		// again then). A QP that only receives stays at RTR: the next
		// scan connects its backup with common values.
		sq.rtsWaited = true
		return false
	}
	b, ok := lookup(sq.remote)
	if !ok {
		return false
	}
	if err := s.connectBackup(sq, b); err != nil {
		return false // try again on the next scan
	}
	if sq.mbox != nil && b.Mailbox != (Mailbox{}) {
		sq.mbox.peer, sq.mbox.peerSet = b.Mailbox, true
	}
	sq.connected = true
	return true
}

// connectBackup takes the backup QP to RTS towards the peer's backup b.
// First the control receive is posted (the peer's notification may come
// before this side has a Conn) and the backup CQs armed on the completion
// channel, so a control message that arrives as soon as the QP is in RTR
// is noticed. A step that fails is retried from where it stopped.
func (s *Shadow) connectBackup(sq *shadowQP, b Backup) error {
	if !sq.ctrlPosted {
		if err := PostControlRecv(sq.bak); err != nil {
			return err
		}
		sq.ctrlPosted = true
	}
	if s.ch != nil {
		for _, cq := range []verbs.CQ{sq.bakCQ, sq.bakRecvCQ} {
			if cq == nil {
				continue
			}
			if err := cq.ReqNotify(false); err != nil {
				return fmt.Errorf("crossnic: shadow: arm backup CQ of QP %#x: %w", sq.bak.QPN(), err)
			}
		}
	}
	if sq.bak.State() == verbs.QPSRTR {
		return s.backupRTS(sq)
	}
	da, _, err := sq.def.Query(verbs.QPAttrPathMTU)
	if err != nil {
		return err
	}
	ah := verbs.AHAttr{DLID: b.LID, PortNum: s.bakPort, SL: da.AHAttr.SL}
	if b.LID == 0 {
		bp, _ := s.bakDesc.Port(s.bakPort)
		ah = verbs.AHAttr{IsGlobal: true, PortNum: s.bakPort,
			GRH: verbs.GlobalRoute{DGID: b.GID, SGIDIndex: uint8(len(bp.GIDs) - 1), HopLimit: 64}}
	}
	rnr := max(da.MinRNRTimer, 1)
	if sq.srq != nil {
		// The peers' control messages that reach the backup SRQ before
		// its receives moved there are answered RNR and sent again after
		// this (srqRNRTimer).
		rnr = max(da.MinRNRTimer, srqRNRTimer)
	}
	rtr := verbs.RCConnect{AH: ah, PathMTU: da.PathMTU, DestQPN: b.QPN, MaxDestRdAtomic: da.MaxDestRdAtomic,
		MinRNRTimer: rnr}.Steps()[1]
	ra := rtr.Attr
	if err := sq.bak.Modify(&ra, rtr.Mask); err != nil {
		return fmt.Errorf("crossnic: shadow backup QP to RTR: %w", err)
	}
	sq.attr.AHAttr, sq.attr.PathMTU, sq.attr.DestQPN, sq.attr.RQPSN = ra.AHAttr, ra.PathMTU, ra.DestQPN, ra.RQPSN
	sq.attr.MaxDestRdAtomic, sq.attr.MinRNRTimer = ra.MaxDestRdAtomic, ra.MinRNRTimer
	return s.backupRTS(sq)
}

func (s *Shadow) backupRTS(sq *shadowQP) error {
	da, _, err := sq.def.Query(verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrMaxQPRdAtomic)
	if err != nil {
		return err
	}
	// The application may connect its QP only to RTR (a QP that only
	// receives) or not be at RTS yet: its RTS attributes are then unset,
	// and the backup takes common values instead.
	if da.Timeout == 0 {
		da.Timeout = 14 // 4.096 us * 2^14 = 67 ms
	}
	if da.RetryCnt == 0 {
		da.RetryCnt = 7
	}
	if da.MaxRdAtomic == 0 {
		if a, err := s.bak.QueryDevice(); err == nil {
			da.MaxRdAtomic = uint8(min(a.MaxQPRdAtom, 16))
		}
	}
	rts := verbs.RCConnect{Timeout: da.Timeout, RetryCnt: da.RetryCnt, RNRRetry: 7, MaxRdAtomic: da.MaxRdAtomic}.Steps()[2]
	ta := rts.Attr
	if err := sq.bak.Modify(&ta, rts.Mask); err != nil {
		return fmt.Errorf("crossnic: shadow backup QP to RTS: %w", err)
	}
	sq.attr.SQPSN, sq.attr.Timeout, sq.attr.RetryCnt, sq.attr.RNRRetry, sq.attr.MaxRdAtomic = ta.SQPSN, ta.Timeout, ta.RetryCnt, ta.RNRRetry, ta.MaxRdAtomic
	return nil
}

// ConnectAttr is what defQP's backup was connected with (its INIT, RTR
// and RTS attributes, initial PSNs included): what a switch back resets
// it with (Recovery.BakAttr). ok is false until it is connected.
func (s *Shadow) ConnectAttr(defQP verbs.QP) (a verbs.QPAttr, ok bool) {
	sq := s.qps[defQP]
	if sq == nil || !sq.connected {
		return verbs.QPAttr{}, false
	}
	return sq.attr, true
}

// Ready reports whether defQP's backup is connected.
func (s *Shadow) Ready(defQP verbs.QP) bool {
	sq := s.qps[defQP]
	return sq != nil && sq.connected
}

// Conn protects defQP (completing into defCQ) with its connected backup.
// The Conn's default leg polls defCQ for both of the QP's queues; its
// backup leg has the backup's CQs. The control receive the backup needs
// was posted when the shadow connected it. The default QP is not queried
// (its HCA may be dead): its capabilities are those given to CreateQP.
func (s *Shadow) Conn(defQP verbs.QP, defCQ verbs.CQ) (*Conn, error) {
	sq := s.qps[defQP]
	if sq == nil || !sq.connected {
		return nil, fmt.Errorf("crossnic: shadow: the backup of QP %#x is not connected yet", defQP.QPN())
	}
	lkeys := make(map[uint32]uint32, len(s.lkeys))
	for k, v := range s.lkeys {
		lkeys[k] = v
	}
	lid, gid := portID(sq.remotePort)
	keys := &KeyMap{LKeys: lkeys, RKey: func(rk uint32) (uint32, bool) {
		return s.dir.LookupMR(MRRef{LID: lid, GID: gid, RKey: rk})
	}}
	// What the Conn needs of the default QP was known at its creation and
	// connect: a default HCA that died cannot be queried any more.
	c, err := newConn(Leg{Ctx: s.def, QP: defQP, CQ: defCQ}, Leg{Ctx: s.bak, QP: sq.bak, CQ: sq.bakCQ, RecvCQ: sq.bakRecvCQ},
		keys, sq.sigAll, sq.cap, sq.remote.QPN)
	if err == nil && sq.mbox != nil {
		c.mbox = sq.mbox.attach()
	}
	return c, err
}

// MailboxPending reports whether the peer wrote a record to defQP's
// mailbox that no Conn has read: the caller builds the QP's Conn
// (Adopt), whose next Poll or Tick handles it. Ask it of a QP that has
// no Conn, and has had one (given back after a switch back): the peer
// notifies such a QP through its mailbox, which wakes nothing (the
// first failover notifies through the control receives instead). One
// load of the inbox; false for a QP without a mailbox.
func (s *Shadow) MailboxPending(defQP verbs.QP) bool {
	sq := s.qps[defQP]
	return sq != nil && sq.mbox != nil && sq.mbox.pending()
}

// BackupOf returns the backup QP of defQP (device, port and number) and
// whether it is connected; ok is false for a QP the shadow does not know.
func (s *Shadow) BackupOf(defQP verbs.QP) (b Backup, connected, ok bool) {
	sq := s.qps[defQP]
	if sq == nil {
		return Backup{}, false, false
	}
	return Backup{Device: s.bakDesc.Name, Port: s.bakPort, QPN: sq.bak.QPN()}, sq.connected, true
}
