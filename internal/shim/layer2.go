package shim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/internal/storedir"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
)

// Layer 2's shadow resources: for every device the application opens, a
// backup device; every MR and RC QP the application makes is mirrored on
// it by crossnic.Shadow, the mappings are published through ibpathd
// (which pushes them to the node at the QP's other end), and the backup
// QP is connected once the peer's backup is known. With a Hotpath set,
// a QP whose backup is connected is armed and fails over onto it
// (failover.go).

// Publisher is the part of the ibpathd session layer 2 uses.
type Publisher interface {
	PublishQP(ctx context.Context, p ownerproto.PublishQP) error
	PublishMR(ctx context.Context, p ownerproto.PublishMR) error
	LookupQP(ctx context.Context, k store.QPKey) (store.QPBackup, error)
	LookupMR(ctx context.Context, k store.MRKey) (store.MRBackup, error)
}

// shadowSet is the layer-2 state of one application context.
type shadowSet struct {
	ctx    uintptr // the application's context
	dev    string
	backup string
	def    verbs.Context // the application's context, as the shadow knows it
	bak    verbs.Context
	sh     *crossnic.Shadow
	dir    *sessionDir
	qps    map[uint32]verbs.QP // by QPN, the QPs created through the shadow
	// express: QPNs on the express lane, whose backup CQs the lane polls
	// (the completion channel is not re-armed for them)
	express map[uint32]bool
	ch      verbs.CompChannel // of the backup CQs; nil: none
	wait    *fdWait           // on ch's fd; nil: ch is polled
	closed  bool              // the runtime closed: ch is not read any more
	events  []backupEvent     // scratch of backupEvents
}

// SetProvider gives the runtime the devices of the node (verbs/ibv in the
// shim): it opens a context of its own per device for port events, and
// the backup device of layer 2.
func (r *Runtime) SetProvider(p verbs.Provider) {
	r.mu.Lock()
	r.prov = p
	r.mu.Unlock()
}

// chooseBackup picks the backup device for dev: IBPATH_BACKUP when it
// names one; else, of the other devices with an ACTIVE port, one with a
// calm port (not drained, and suppressed neither by the process's flap
// damping nor by ibpathd's: views.go), the least congested by ibpathd's
// view of its calm ports (the first in rail order after dev among
// equals: with no congestion known, the next calm rail); else the first
// with an ACTIVE port.
func (r *Runtime) chooseBackup(dev string) (string, verbs.Context, error) {
	if r.cfg.Backup != "auto" {
		if r.cfg.Backup == dev {
			return "", nil, fmt.Errorf("%s=%s is the device itself", EnvBackup, dev)
		}
		c, err := r.prov.Open(r.cfg.Backup)
		if err != nil {
			return "", nil, fmt.Errorf("%s=%s: %w", EnvBackup, r.cfg.Backup, err)
		}
		return r.cfg.Backup, c, nil
	}
	devs, err := r.prov.Devices()
	if err != nil {
		return "", nil, err
	}
	type choice struct {
		name       string
		ctx        verbs.Context
		congestion float64
	}
	// best: the calm device least congested; first: the first calm one
	// (the choice without congestion); damped: the first whose ACTIVE
	// ports are none calm. The devices, in the provider's order (rail
	// order: mlx5_i on rail i), are taken from the one after dev on,
	// wrapping around (pathsel.BackupOrder): the backups of a host's rails
	// spread over its other rails instead of all landing on the first, and
	// the two ends of a connection on rail i, cabled alike, both take rail
	// i+1.
	def := slices.IndexFunc(devs, func(d verbs.DeviceInfo) bool { return d.Name == dev })
	var best, first, damped *choice
	for _, i := range pathsel.BackupOrder(len(devs), def) {
		d := devs[i]
		if d.Name == dev {
			continue
		}
		c, err := r.prov.Open(d.Name)
		if err != nil {
			continue
		}
		active, calm, congestion := false, false, 0.0
		if h, err := pathsel.Describe(c); err == nil {
			for _, p := range h.Ports {
				if !p.Active() {
					continue
				}
				active = true
				if ok, cg := r.candidate(d.Name, p.Num); ok && (!calm || cg < congestion) {
					calm, congestion = true, cg
				}
			}
		}
		switch {
		case calm && first == nil:
			first = &choice{d.Name, nil, congestion}
			best = &choice{d.Name, c, congestion}
		case calm && congestion < best.congestion:
			best.ctx.Close()
			best = &choice{d.Name, c, congestion}
		case active && !calm && damped == nil:
			damped = &choice{d.Name, c, 0}
		default:
			c.Close()
		}
	}
	if best != nil {
		if damped != nil {
			damped.ctx.Close()
		}
		if best.name != first.name {
			r.log.Info("libibpath: backup chosen for congestion", "device", dev, "backup", best.name,
				"congestion_per_s", best.congestion, "instead_of", first.name, "its_congestion_per_s", first.congestion)
		}
		return best.name, best.ctx, nil
	}
	if damped != nil {
		r.log.Info("libibpath: every other device's ACTIVE ports are drained or suppressed by flap damping; the backup is one of them", "device", dev, "backup", damped.name)
		return damped.name, damped.ctx, nil
	}
	return "", nil, fmt.Errorf("no other device with an ACTIVE port")
}

// setupShadow prepares layer 2 for an application context on dev.
func (r *Runtime) setupShadow(ctx uintptr, dev string, def verbs.Context) {
	name, bak, err := r.chooseBackup(dev)
	if err != nil {
		r.log.Warn("libibpath: no backup device; layer 2 cannot protect this device's QPs", "device", dev, "err", err)
		return
	}
	dir := &sessionDir{r: r, mem: crossnic.NewMemDirectory()}
	sh, err := crossnic.NewShadow(def, bak, dir)
	if err != nil {
		bak.Close()
		r.log.Warn("libibpath: layer 2 shadow", "device", dev, "backup", name, "err", err)
		return
	}
	// With switch back on, every QP not on an SRQ gets a mailbox: a
	// second fault during or after a switch back is handed over through
	// it (docs/CROSSNIC.md, "The mailbox"; watchInboxes).
	sh.SetMailboxes(r.cfg.SwitchBack)
	set := &shadowSet{ctx: ctx, dev: dev, backup: name, def: def, bak: bak, sh: sh, dir: dir, qps: map[uint32]verbs.QP{}, express: map[uint32]bool{}}
	r.l2mu.Lock()
	r.startNotify(set) // before any backup CQ exists
	r.shadows[ctx] = set
	start := !r.scanning
	r.scanning = true
	r.l2mu.Unlock()
	r.log.Info("libibpath: layer 2 shadow resources", "device", dev, "backup", name)
	// The backup's DEVICE_FATAL surfaces the Conns that run (or wait
	// for the peer's answer) there (deviceFault).
	r.watchOnce(name)
	if start {
		if r.st != nil {
			r.st.startScan()
		} else {
			go r.scanLoop()
		}
	}
}

// closeShadow ends layer 2's shadow of the application's context ctx,
// which the application closed: its backup context is closed with all
// that layer 2 made on it (PDs, CQs, QPs, memory registrations, the
// completion channel), and its channel no longer read. Without it every
// open and close of a device left a backup context open behind it (a
// program that opens its devices again and again ran out of file
// descriptors). The application's QPs of ctx were forgotten first.
func (r *Runtime) closeShadow(ctx uintptr) {
	r.l2mu.Lock()
	defer r.l2mu.Unlock()
	s := r.shadows[ctx]
	if s == nil {
		return
	}
	delete(r.shadows, ctx)
	s.closed = true
	if s.wait != nil {
		s.wait.Close()
	}
	err := s.sh.Close()
	if s.ch != nil {
		err = errors.Join(err, s.ch.Destroy())
	}
	err = errors.Join(err, s.bak.Close())
	if err != nil {
		r.log.Warn("libibpath: release the backup resources of a closed device context", "device", s.dev, "backup", s.backup, "err", err)
	}
}

// MRSpan says whether a registration of length bytes at addr can be
// mirrored on the backup device as a slice of memory (the C side then
// hands MR its memory as a slice), and if not why: an on-demand-paging
// registration at address 0 (an implicit one, the whole address space,
// is mirrored without a slice: IsImplicitODP) or any span a Go slice
// cannot hold or that wraps the address space. Such a region is not
// mirrored: a failover of a QP that uses it finds no backup key and
// surfaces the error, as plain verbs report it.
func MRSpan(addr uintptr, length uint64, access verbs.AccessFlags) (ok bool, why string) {
	switch {
	case length == 0:
		return false, "a zero-length region"
	case addr == 0 && access&verbs.AccessOnDemand != 0:
		return false, "an on-demand-paging region at address 0"
	case addr == 0:
		return false, "a region at address 0"
	case length > maxMirrored || uint64(addr)+length < uint64(addr):
		return false, fmt.Sprintf("a region of %d bytes at %#x (more than a mirror can map)", length, addr)
	}
	return true, ""
}

// maxMirrored is the largest region MRSpan lets be mirrored: 2^47 bytes,
// the user half of an x86-64 or arm64 address space.
const maxMirrored = 1 << 47

// MRNotMirrored records a registration that MRSpan refused (said once
// per region).
func (r *Runtime) MRNotMirrored(ctx uintptr, mr verbs.MR, why string) {
	r.log.Warn("libibpath: MR not mirrored on the backup device; a failover of a QP using it surfaces the error",
		"lkey", mr.LKey(), "rkey", mr.RKey(), "why", why)
}

// IsImplicitODP reports whether a registration of length bytes at addr
// with access is an implicit on-demand-paging region: ibv_reg_mr(pd,
// NULL, SIZE_MAX) with IBV_ACCESS_ON_DEMAND, the whole address space. MR
// mirrors it (mr's Len verbs.ImplicitLen, no slice) with an implicit
// registration on the backup device, where that device has implicit ODP.
func IsImplicitODP(addr uintptr, length uint64, access verbs.AccessFlags) bool {
	return addr == 0 && length == ^uint64(0) && access&verbs.AccessOnDemand != 0
}

// MR mirrors a memory registration on the backup device: buf's memory,
// or for an implicit on-demand-paging region (verbs.IsImplicitODP: buf
// nil) the whole address space, registered implicitly there too. A
// backup device that refuses leaves the region unmirrored, said at warn.
func (r *Runtime) MR(ctx uintptr, pd verbs.PD, mr verbs.MR, buf []byte) {
	r.l2mu.Lock()
	s := r.shadows[ctx]
	if s == nil {
		r.l2mu.Unlock()
		return
	}
	implicit := verbs.IsImplicitODP(mr)
	var err error
	if implicit {
		err = s.sh.RegImplicitODP(pd, mr)
	} else {
		err = s.sh.RegMR(pd, mr, buf)
	}
	bk, ok := s.sh.BackupLKey(mr.LKey())
	r.l2mu.Unlock()
	switch {
	case err != nil && implicit:
		r.MRNotMirrored(ctx, mr, fmt.Sprintf("an implicit on-demand-paging region, which the backup device %s does not register: %v", s.backup, err))
		return
	case err != nil:
		r.log.Warn("libibpath: mirror MR on the backup", "device", s.dev, "rkey", mr.RKey(), "err", err)
		return
	case implicit:
		r.log.Info("libibpath: implicit on-demand-paging region mirrored on the backup device",
			"device", s.dev, "backup", s.backup, "lkey", mr.LKey(), "backup_lkey", bk)
	}
	if ok {
		r.mapNewMR(ctx, mr.LKey(), bk) // Conns built before it learn it
	}
}

// DmabufMR mirrors a dma-buf registration (ibv_reg_dmabuf_mr: device
// memory, a GPU's, behind file descriptor fd, at offset) on the backup
// device, by the same fd while the application's call has not returned.
// A backup device that registers no dma-buf leaves the region
// unmirrored, said at warn: a failover of a QP using it surfaces.
func (r *Runtime) DmabufMR(ctx uintptr, pd verbs.PD, mr verbs.MR, offset uint64, fd int) {
	r.l2mu.Lock()
	s := r.shadows[ctx]
	if s == nil {
		r.l2mu.Unlock()
		return
	}
	err := s.sh.RegDmabufMR(pd, mr, offset, fd)
	bk, ok := s.sh.BackupLKey(mr.LKey())
	r.l2mu.Unlock()
	if err != nil {
		r.log.Warn("libibpath: mirror dma-buf MR on the backup; a failover of a QP using it surfaces the error",
			"device", s.dev, "rkey", mr.RKey(), "fd", fd, "err", err)
		return
	}
	if ok {
		r.mapNewMR(ctx, mr.LKey(), bk)
	}
}

// ReregOutcome is what ibv_rereg_mr left of a region (its return code,
// read by cmd/libibpath from verbs.h's enum ibv_rereg_mr_err_code).
type ReregOutcome int

const (
	// ReregNew: the region is the new one (success, or
	// IBV_REREG_MR_ERR_DO_FORK_OLD).
	ReregNew ReregOutcome = iota
	// ReregOld: nothing changed (IBV_REREG_MR_ERR_INPUT,
	// IBV_REREG_MR_ERR_DONT_FORK_NEW).
	ReregOld
	// ReregUnusable: the region must not be used (IBV_REREG_MR_ERR_CMD,
	// IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW, anything else).
	ReregUnusable
)

// ReregMR follows the application's ibv_rereg_mr of the region whose
// local key was oldLKey: mr is the region as the call left it (keys,
// address, length, PD; its access is the new one when changeAccess,
// else the mirror keeps the old). A new region replaces the mirror (the
// old backup registration released, the new one made as MR makes it:
// its translation may point elsewhere now); an unchanged one keeps it;
// an unusable one loses it, so a failover of a QP using it surfaces
// rather than replay through a registration of memory the region no
// longer names.
func (r *Runtime) ReregMR(ctx uintptr, oldLKey uint32, pd verbs.PD, mr verbs.MR, changeAccess bool, buf []byte, o ReregOutcome) {
	if o == ReregOld {
		return
	}
	r.l2mu.Lock()
	s := r.shadows[ctx]
	var access verbs.AccessFlags
	var known bool
	if s != nil {
		access, known = s.sh.MRAccess(oldLKey)
	}
	r.l2mu.Unlock()
	if s == nil {
		return
	}
	r.DeregMR(ctx, oldLKey)
	switch {
	case o != ReregNew:
		r.log.Warn("libibpath: ibv_rereg_mr left the region unusable: its backup registration is released",
			"device", s.dev, "lkey", oldLKey)
		return
	case changeAccess:
		access = mr.Access()
	case !known:
		return // never mirrored: its first registration was not either
	}
	r.MR(ctx, pd, reregMR{mr, access}, buf)
}

// reregMR is a region after ibv_rereg_mr with the access its mirror
// takes.
type reregMR struct {
	verbs.MR
	access verbs.AccessFlags
}

func (m reregMR) Access() verbs.AccessFlags { return m.access }

// DeregMR releases the backup registration of the application's region
// with local key lkey (it is deregistering it).
func (r *Runtime) DeregMR(ctx uintptr, lkey uint32) {
	r.l2mu.Lock()
	defer r.l2mu.Unlock()
	if s := r.shadows[ctx]; s != nil {
		if err := s.sh.DeregMR(lkey); err != nil {
			r.log.Warn("libibpath: release the backup of an MR", "device", s.dev, "err", err)
		}
	}
}

// ShadowQP mirrors an RC QP on the backup device. sendCQ and recvCQ are
// the QP's CQs as verbs objects that poll the provider directly (layer 2
// polls them once the QP is diverted); init is the QP's creation
// attributes with the capabilities the provider granted.
func (r *Runtime) ShadowQP(ctx uintptr, pd verbs.PD, qp verbs.QP, sendCQ, recvCQ verbs.CQ, init verbs.QPInitAttr) {
	init.SendCQ, init.RecvCQ = sendCQ, recvCQ
	r.l2mu.Lock()
	s := r.shadows[ctx]
	if s == nil {
		r.l2mu.Unlock()
		return
	}
	if err := s.sh.CreateQP(pd, qp, init); err != nil {
		r.l2mu.Unlock()
		r.log.Warn("libibpath: mirror QP on the backup", "device", s.dev, "qpn", qp.QPN(), "err", err)
		return
	}
	s.qps[qp.QPN()] = qp
	r.l2mu.Unlock()
	if sendCQ != nil {
		r.track(ctx, s, qp, sendCQ, recvCQ, init.SRQ)
	}
}

// Connected tells layer 2 the application connected a QP (after its
// RTR): its mapping is published, and its backup connected when the
// peer's is known.
func (r *Runtime) Connected(ctx uintptr, qpn uint32) {
	r.l2mu.Lock()
	s := r.shadows[ctx]
	var err error
	if s != nil && s.qps[qpn] != nil {
		err = s.sh.Connected(s.qps[qpn])
	}
	r.l2mu.Unlock()
	r.log.Debug("libibpath: layer 2 saw the connect", "qpn", qpn, "shadowed", s != nil, "err", err)
	if err != nil {
		r.log.Warn("libibpath: layer 2 after connect", "qpn", qpn, "err", err)
	}
	select {
	case r.rescan <- struct{}{}:
	default:
	}
	r.refreshBackups()
	r.armConnected()
}

// Scan intervals: a scan that connects nothing backs off from scanMin to
// scanMax (each scan asks ibpathd about every backup still unconnected);
// a new connect starts again from scanMin.
const (
	scanMin = 50 * time.Millisecond
	scanMax = 2 * time.Second
)

// scanLoop connects backup QPs whose peer's backup became known.
func (r *Runtime) scanLoop() {
	wait := scanMin
	for {
		select {
		case <-r.stop:
			return
		case <-r.rescan:
			wait = scanMin
		case <-time.After(wait):
		}
		wait = r.scanOnce(wait)
	}
}

// scanOnce is one scan of the scan loop, which waited wait before it: it
// returns the wait before the next.
func (r *Runtime) scanOnce(wait time.Duration) time.Duration {
	r.republishDue()
	r.prefetchMRs()
	// The peers' backups are looked up without l2mu, which the
	// application's create_qp, reg_mr and connects take: a scan makes a
	// round trip to ibpathd per waiting QP (a miss pulls from the peer's
	// node), and holding the lock across them made every connect of a
	// burst wait for the scans the burst set off. A hit is kept in the
	// set's cache, which the connecting pass reads under l2mu.
	type waiting struct {
		set *shadowSet
		eps []crossnic.Endpoint
	}
	var ws []waiting
	r.l2mu.Lock()
	for _, s := range r.shadows {
		if eps := s.sh.Pending(); len(eps) > 0 {
			ws = append(ws, waiting{s, eps})
		}
	}
	r.l2mu.Unlock()
	found := 0
	for _, w := range ws {
		for _, ep := range w.eps {
			if _, ok := w.set.dir.LookupQP(ep); ok {
				found++
			}
		}
	}
	n := 0
	if found > 0 {
		r.l2mu.Lock()
		for _, w := range ws {
			if r.shadows[w.set.ctx] == w.set {
				n += w.set.sh.ScanWith(w.set.dir.mem.LookupQP)
			}
		}
		r.l2mu.Unlock()
	}
	if n > 0 {
		r.log.Info("libibpath: backup QPs connected", "count", n)
		r.refreshBackups()
		r.armConnected()
		return scanMin
	}
	return min(2*wait, scanMax)
}

// refreshBackups copies each QP's backup into its status and reports the
// changed ones.
func (r *Runtime) refreshBackups() {
	type upd struct {
		ctx    uintptr
		qpn    uint32
		backup status.Backup
	}
	var us []upd
	r.l2mu.Lock()
	for ctx, s := range r.shadows {
		for qpn, qp := range s.qps {
			if b, c, ok := s.sh.BackupOf(qp); ok {
				us = append(us, upd{ctx, qpn, status.Backup{Device: b.Device, QPN: b.QPN, Connected: c}})
			}
		}
	}
	r.l2mu.Unlock()
	r.mu.Lock()
	var changed []qpKey
	for _, u := range us {
		q := r.qps[qpKey{u.ctx, u.qpn}]
		if q == nil {
			continue
		}
		if q.status.Backup != u.backup {
			q.status.Backup = u.backup
			changed = append(changed, qpKey{u.ctx, u.qpn})
		}
	}
	var snaps []status.QP
	for _, k := range changed {
		snaps = append(snaps, r.qps[k].status)
	}
	r.mu.Unlock()
	for _, s := range snaps {
		r.report(s)
	}
}

// remoteOf is the route of the other end of one of the process's QPs,
// known from its connect (the push target of its mapping).
func (r *Runtime) remoteOf(qpn uint32) ownerproto.Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, q := range r.qps {
		if k.qpn == qpn {
			return q.route
		}
	}
	return ownerproto.Route{}
}

// remotes are the routes of every connected QP's other end.
func (r *Runtime) remotes() []ownerproto.Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ownerproto.Route
	seen := map[ownerproto.Route]bool{}
	for _, q := range r.qps {
		if (q.route != ownerproto.Route{}) && !seen[q.route] {
			seen[q.route] = true
			out = append(out, q.route)
		}
	}
	return out
}

// reportFirst reports the QPs numbered qpn to p's session before their
// entry is published through it: ibpathd takes an entry only for a QP
// the process reported (docs/SECURITY.md, "Owner sessions"), and a QP
// connected while the session was attaching may not have been yet.
func (r *Runtime) reportFirst(p Publisher, qpn uint32) {
	rep, ok := p.(Reporter)
	if !ok {
		return
	}
	r.mu.Lock()
	var qs []status.QP
	for k, q := range r.qps {
		if k.qpn == qpn {
			qs = append(qs, q.status)
		}
	}
	r.mu.Unlock()
	for _, s := range qs {
		if err := rep.ReportQP(s); err != nil {
			r.log.Debug("libibpath: report QP to ibpathd", "qpn", s.QPN, "err", err)
		}
	}
}

// publisher is the session to publish through, or nil.
func (r *Runtime) publisher() Publisher {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, _ := r.rep.(Publisher)
	return p
}

// sessionDir is the crossnic.Directory of a process: what it publishes is
// kept here and sent to ibpathd (which stores it and pushes it to the
// peer's node); lookups are answered from here, else asked of ibpathd.
type sessionDir struct {
	r   *Runtime
	mem *crossnic.MemDirectory

	mu  sync.Mutex
	qps []ownerproto.PublishQP // everything published, for a session that attaches later
	mrs []ownerproto.PublishMR
	// pushed are the routes every MR published so far was pushed to. An
	// MR is usually registered before any QP is connected, when no peer
	// is known: it goes to a peer's node when the first QP to that peer
	// is published (pushMRs), else the peer could fail over before
	// replication brings it the rkey mapping (an RDMA WRITE's replay
	// needs it).
	pushed map[ownerproto.Route]bool
}

// republish sends everything published so far to a session that has just
// attached (the shim dials ibpathd in the background, so the first QPs of
// a program are often connected before the session is up). A publication
// that fails does not stop the others: the peer needs the MRs' mappings
// even when a QP's publication timed out (ibpathd may have taken it and
// answered late). The error names every one that failed and may go
// through when sent again; refusals are logged (deliveryFailed).
func (d *sessionDir) republish(p Publisher) error {
	d.mu.Lock()
	qps := append([]ownerproto.PublishQP(nil), d.qps...)
	mrs := append([]ownerproto.PublishMR(nil), d.mrs...)
	d.mu.Unlock()
	var refused, failed []error
	note := func(err error) {
		if errors.Is(err, ownerproto.ErrRefused) {
			refused = append(refused, err)
		} else {
			failed = append(failed, err)
		}
	}
	for _, q := range qps {
		q.Remote = d.r.remoteOf(q.Key.QPN)
		d.r.reportFirst(p, q.Key.QPN)
		ctx, cancel := context.WithTimeout(context.Background(), dirTimeout)
		err := p.PublishQP(ctx, q)
		cancel()
		if err != nil {
			note(fmt.Errorf("publish QP %#x: %w", q.Key.QPN, err))
		}
	}
	for _, m := range mrs {
		m.Remotes = d.r.remotes()
		ctx, cancel := context.WithTimeout(context.Background(), dirTimeout)
		err := p.PublishMR(ctx, m)
		cancel()
		if err != nil {
			note(fmt.Errorf("publish MR rkey %#x: %w", m.Key.RKey, err))
		}
	}
	if len(refused) > 0 {
		d.r.deliveryFailed(errors.Join(refused...)) // logged, not retried
	}
	if len(failed) > 0 {
		return errors.Join(failed...)
	}
	return nil
}

// republishRetry is how long after a republication that failed the scan
// tries again.
const republishRetry = time.Second

// republishAll sends every shadow's publications to p and wakes the scan.
// When any fails, the scan sends them all again republishRetry later,
// until they all go through (or the session changes).
func (r *Runtime) republishAll(p Publisher) {
	r.l2mu.Lock()
	var dirs []*sessionDir
	for _, s := range r.shadows {
		dirs = append(dirs, s.dir)
	}
	r.l2mu.Unlock()
	// The due retry is this one; a publication that fails from here on,
	// in it or beside it, makes the next.
	r.republishAt.Store(0)
	for _, d := range dirs {
		if err := d.republish(p); err != nil {
			r.deliveryFailed(fmt.Errorf("republish: %w", err))
		}
	}
	select {
	case r.rescan <- struct{}{}:
	default:
	}
}

// deliveryFailed is told that a publication recorded here did not reach
// ibpathd (it answered late under load, or the session broke). Nothing
// is dropped: the scan sends every publication again republishRetry later
// (an earlier due time stands), until they all go through, for the peer's
// node needs each mapping before a failover (an RDMA WRITE's replay
// cannot translate an rkey it never learnt).
// A refusal (ownerproto.ErrRefused: ibpathd would answer the same again)
// is only logged.
func (r *Runtime) deliveryFailed(err error) {
	if errors.Is(err, ownerproto.ErrRefused) {
		r.log.Warn("libibpath: ibpathd refused backup attributes; the peer cannot fail over to them", "err", err)
		return
	}
	r.log.Warn("libibpath: backup attributes did not reach ibpathd; trying again", "err", err, "in", republishRetry)
	r.republishAt.CompareAndSwap(0, r.now().Add(republishRetry).UnixNano())
}

// republishDue sends the publications again when the last republication
// failed and its retry time has come.
func (r *Runtime) republishDue() {
	at := r.republishAt.Load()
	if at == 0 || r.now().UnixNano() < at {
		return
	}
	if p := r.publisher(); p != nil {
		r.republishAll(p)
	}
}

// dirTimeout bounds a publication or lookup through ibpathd. A connect's
// publication and its one lookup run under the shadow's lock, which the
// application's reg_mr and create_qp also take, so they are kept short;
// a miss is retried by the next scan, which looks up without the lock.
const dirTimeout = 300 * time.Millisecond

func (d *sessionDir) PublishQP(def crossnic.Endpoint, b crossnic.Backup) error {
	if err := d.mem.PublishQP(def, b); err != nil {
		return err
	}
	pub := ownerproto.PublishQP{Key: store.QPKey{GID: def.GID, LID: def.LID, QPN: def.QPN},
		Backup: storedir.QPValue(b), Remote: d.r.remoteOf(def.QPN)}
	d.mu.Lock()
	d.qps = append(d.qps, pub)
	d.mu.Unlock()
	p := d.r.publisher()
	if p == nil {
		return nil // no ibpathd: the peer cannot learn it; the QP stays unprotected
	}
	d.r.reportFirst(p, def.QPN)
	ctx, cancel := context.WithTimeout(context.Background(), dirTimeout)
	defer cancel()
	err := p.PublishQP(ctx, pub)
	d.r.log.Debug("libibpath: published a backup QP", "qpn", def.QPN, "backup", b.QPN, "push_to", pub.Remote, "err", err)
	if err != nil {
		d.r.deliveryFailed(fmt.Errorf("publish QP %#x: %w", def.QPN, err))
		return nil
	}
	d.pushMRs(p, pub.Remote)
	return nil
}

// pushMRs publishes every MR published so far to route r's node, once
// per route.
func (d *sessionDir) pushMRs(p Publisher, r ownerproto.Route) {
	if (r == ownerproto.Route{}) {
		return
	}
	d.mu.Lock()
	if d.pushed == nil {
		d.pushed = map[ownerproto.Route]bool{}
	}
	if d.pushed[r] {
		d.mu.Unlock()
		return
	}
	d.pushed[r] = true
	mrs := append([]ownerproto.PublishMR(nil), d.mrs...)
	d.mu.Unlock()
	for _, m := range mrs {
		m.Remotes = []ownerproto.Route{r}
		ctx, cancel := context.WithTimeout(context.Background(), dirTimeout)
		err := p.PublishMR(ctx, m)
		cancel()
		if err != nil {
			d.mu.Lock()
			delete(d.pushed, r) // the next publication to r tries again
			d.mu.Unlock()
			d.r.deliveryFailed(fmt.Errorf("push MR rkey %#x to the peer's node: %w", m.Key.RKey, err))
			return
		}
	}
}

func (d *sessionDir) LookupQP(def crossnic.Endpoint) (crossnic.Backup, bool) {
	if b, ok := d.mem.LookupQP(def); ok {
		return b, true
	}
	p := d.r.publisher()
	if p == nil {
		return crossnic.Backup{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), dirTimeout)
	defer cancel()
	v, err := p.LookupQP(ctx, store.QPKey{GID: def.GID, LID: def.LID, QPN: def.QPN})
	if err != nil {
		d.r.log.Debug("libibpath: peer's backup QP not known yet", "peer", def.String(), "err", err)
		return crossnic.Backup{}, false
	}
	b := storedir.BackupOf(v)
	_ = d.mem.PublishQP(def, b) // cache: failover never waits on the network
	return b, true
}

func (d *sessionDir) PublishMR(def crossnic.MRRef, rkey uint32) error {
	if err := d.mem.PublishMR(def, rkey); err != nil {
		return err
	}
	pub := ownerproto.PublishMR{Key: store.MRKey{GID: def.GID, LID: def.LID, RKey: def.RKey},
		Backup: store.MRBackup{RKey: rkey}, Remotes: d.r.remotes()}
	d.mu.Lock()
	d.mrs = append(d.mrs, pub)
	d.mu.Unlock()
	p := d.r.publisher()
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), dirTimeout)
	defer cancel()
	if err := p.PublishMR(ctx, pub); err != nil {
		d.r.deliveryFailed(fmt.Errorf("publish MR rkey %#x: %w", def.RKey, err))
	}
	return nil
}

func (d *sessionDir) LookupMR(def crossnic.MRRef) (uint32, bool) {
	if k, ok := d.mem.LookupMR(def); ok {
		return k, true
	}
	if k, ok := d.r.peerMRs.get(def); ok {
		return k, true
	}
	p := d.r.publisher()
	if p == nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), dirTimeout)
	defer cancel()
	v, err := p.LookupMR(ctx, store.MRKey{GID: def.GID, LID: def.LID, RKey: def.RKey})
	if err != nil {
		d.r.log.Debug("libibpath: peer's memory registration not known yet", "lid", def.LID, "gid", def.GID.String(), "rkey", fmt.Sprintf("%#x", def.RKey), "err", err)
		return 0, false
	}
	_ = d.mem.PublishMR(def, v.RKey)
	return v.RKey, true
}
