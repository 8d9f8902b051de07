package sim

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// SetLink pulls (up=false) or plugs back (up=true) the cable of port p.
// Pulling raises PORT_ERR at once; plugging brings the port to INIT and,
// after the subnet manager's sweep (Config.PortActivateDelay), to ACTIVE
// with PORT_ACTIVE. Packets on a pulled link are lost.
func (f *Fabric) SetLink(p *Port, up bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == nil || p.leaf == nil {
		return fmt.Errorf("sim: set link: port is nil or not cabled")
	}
	f.setCable(p, up)
	return nil
}

func (f *Fabric) setCable(p *Port, up bool) {
	if p.cable == up {
		return
	}
	p.cable = up
	if f.tracer != nil {
		f.trace(p.hca, "fault", "cable of %v %s", p, map[bool]string{true: "plugged", false: "pulled"}[up])
	}
	if up {
		f.linkUp(p)
	} else {
		f.linkDown(p, verbs.PhysPolling)
	}
}

// linkDown takes a port down, raising PORT_ERR if it was up.
func (f *Fabric) linkDown(p *Port, phys verbs.PhysState) {
	p.upGen++
	p.downAt = f.now
	was := p.state
	p.state, p.phys = verbs.PortDown, phys
	if was != verbs.PortDown {
		p.cnt.linkDowned++
	}
	if was != verbs.PortDown && p.hca.alive {
		p.hca.raiseDevice(verbs.AsyncEvent{Type: verbs.EventPortErr, Port: p.num})
	}
}

// linkUp trains the link if cable, HCA and leaf allow, then activates the
// port after the SM sweep.
func (f *Fabric) linkUp(p *Port) {
	if !p.cable || !p.hca.alive || p.leaf == nil || !p.leaf.alive || p.state != verbs.PortDown {
		return
	}
	p.upGen++
	gen := p.upGen
	p.state, p.phys = verbs.PortInit, verbs.PhysLinkUp
	f.at(f.now+f.cfg.PortActivateDelay, func() {
		if p.upGen != gen || p.state != verbs.PortInit {
			return
		}
		p.state = verbs.PortActive
		if f.tracer != nil {
			f.trace(p.hca, "port", "%v ACTIVE", p)
		}
		p.hca.raiseDevice(verbs.AsyncEvent{Type: verbs.EventPortActive, Port: p.num})
		p.hca.rearmWaiting(p)
	})
}

// Flap pulls the cable of p at virtual time start, plugs it back downFor
// later, and repeats every period, count times.
func (f *Fabric) Flap(p *Port, start, downFor, period time.Duration, count int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == nil || p.leaf == nil {
		return fmt.Errorf("sim: flap: port is nil or not cabled")
	}
	if count < 1 || downFor <= 0 || (count > 1 && period <= downFor) {
		return fmt.Errorf("sim: flap %v: need count >= 1, downFor > 0 and period > downFor (got %d, %v, %v)", p, count, downFor, period)
	}
	for i := 0; i < count; i++ {
		t := start + time.Duration(i)*period
		f.at(t, func() { f.setCable(p, false) })
		f.at(t+downFor, func() { f.setCable(p, true) })
	}
	return nil
}

// At runs fault at virtual time t with the fabric in a consistent state;
// it is for scheduling the exported fault methods (it must not block). The
// function runs without the fabric lock held by the caller's goroutine, so
// it may call exported methods.
func (f *Fabric) At(t time.Duration, fault func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at(t, func() {
		f.mu.Unlock()
		defer f.mu.Lock()
		fault()
	})
}

// KillHCA makes an adapter die: DEVICE_FATAL on its contexts, every QP
// flushed (WR_FLUSH_ERR for all outstanding WRs), its ports dead without
// port events, and every later verb on its contexts failing with EIO. The
// peers of its QPs see only silence and time out.
func (f *Fabric) KillHCA(a *HCA) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a == nil {
		return fmt.Errorf("sim: kill HCA: nil")
	}
	if !a.alive {
		return fmt.Errorf("sim: kill HCA %s/%s: already dead", a.host.name, a.name)
	}
	if f.tracer != nil {
		f.trace(a, "fault", "HCA %s/%s dies", a.host.name, a.name)
	}
	a.raiseDevice(verbs.AsyncEvent{Type: verbs.EventDeviceFatal})
	// Dead from here: CQEs still on their way are lost (SetCQEDelay);
	// the flushes of a profile that makes them are the driver's, written
	// at once.
	a.alive = false
	a.diedAt = f.now
	for _, q := range a.qpList {
		if f.beh.fatalFlush {
			q.enterErr(^uint64(0), verbs.WCWRFlushErr)
		} else {
			q.die()
		}
	}
	a.gen++
	for _, p := range a.ports {
		p.upGen++
		p.state, p.phys = verbs.PortDown, verbs.PhysDisabled
	}
	return nil
}

// ReviveHCA brings a dead adapter back, as after a reset: contexts opened
// before its death stay dead; new ones see the ports train and go ACTIVE.
func (f *Fabric) ReviveHCA(a *HCA) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a == nil {
		return fmt.Errorf("sim: revive HCA: nil")
	}
	if a.alive {
		return fmt.Errorf("sim: revive HCA %s/%s: not dead", a.host.name, a.name)
	}
	a.alive = true
	if f.tracer != nil {
		f.trace(a, "fault", "HCA %s/%s revived", a.host.name, a.name)
	}
	for _, p := range a.ports {
		f.linkUp(p)
	}
	return nil
}

// FailSwitch kills a switch. A dead leaf takes its ports down (PORT_ERR
// on each); a dead spine silently breaks the routes through it.
func (f *Fabric) FailSwitch(s *Switch) error {
	return f.setSwitch(s, false)
}

// ReviveSwitch brings a switch back.
func (f *Fabric) ReviveSwitch(s *Switch) error {
	return f.setSwitch(s, true)
}

func (f *Fabric) setSwitch(s *Switch, alive bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s == nil {
		return fmt.Errorf("sim: switch: nil")
	}
	if s.alive == alive {
		return fmt.Errorf("sim: switch %s: already %s", s.name, map[bool]string{true: "alive", false: "dead"}[alive])
	}
	s.alive = alive
	if f.tracer != nil && len(f.hosts) > 0 && len(f.hosts[0].hcas) > 0 {
		f.trace(f.hosts[0].hcas[0], "fault", "switch %s %s", s.name, map[bool]string{true: "revived", false: "dies"}[alive])
	}
	for _, p := range s.ports {
		if alive {
			f.linkUp(p)
		} else {
			f.linkDown(p, verbs.PhysPolling)
		}
	}
	return nil
}

// SetLoss sets the probability that a request (req) or a response (resp:
// ACK, NAK, read or atomic response) entering or leaving port p is lost.
func (f *Fabric) SetLoss(p *Port, req, resp float64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == nil {
		return fmt.Errorf("sim: set loss: nil port")
	}
	if req < 0 || req > 1 || resp < 0 || resp > 1 {
		return fmt.Errorf("sim: set loss on %v: probabilities must be in [0,1], got %v and %v", p, req, resp)
	}
	p.reqLoss, p.respLoss = req, resp
	return nil
}

// SetDelay gives every packet entering or leaving port p an extra
// latency drawn uniformly in [0, max] (0 turns it off): a congested or
// adaptively routed path, on which packets arrive late and out of order.
// The responder's PSN check sorts them out (sequence NAK, duplicate).
func (f *Fabric) SetDelay(p *Port, max time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == nil {
		return fmt.Errorf("sim: set delay: nil port")
	}
	if max < 0 {
		return fmt.Errorf("sim: set delay on %v: %v is negative", p, max)
	}
	p.delay = max
	return nil
}

// SetCQEDelay makes every completion of HCA a reach its CQ d after the
// HCA made it (0: at once). The HCA executes and acknowledges first, so
// an HCA that dies within d of an execution has acknowledged it to the
// peer and never tells its own application: "ACK sent, the HCA died
// before the CQE reached memory".
func (f *Fabric) SetCQEDelay(a *HCA, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a == nil {
		return fmt.Errorf("sim: set CQE delay: nil HCA")
	}
	if d < 0 {
		return fmt.Errorf("sim: set CQE delay on %s: %v is negative", a.name, d)
	}
	a.cqeDelay = d
	return nil
}

// psnDrop is a one-shot rule losing the request (or the response to it)
// of requester QP qp whose PSN range holds psn.
type psnDrop struct {
	qp   *QP
	psn  uint32
	resp bool
}

// DropRequest loses, once, the request of requester qp carrying psn.
func (f *Fabric) DropRequest(qp verbs.QP, psn uint32) error {
	return f.addDrop(qp, psn, false)
}

// DropResponse loses, once, the response (ACK, read or atomic response,
// NAK) to requester qp covering psn: the "executed, ACK lost" trace.
func (f *Fabric) DropResponse(qp verbs.QP, psn uint32) error {
	return f.addDrop(qp, psn, true)
}

func (f *Fabric) addDrop(qp verbs.QP, psn uint32, resp bool) error {
	q, err := ruleQP("drop", qp, psn)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drops = append(f.drops, psnDrop{qp: q, psn: psn, resp: resp})
	return nil
}

// ruleQP checks the arguments of a PSN rule (kind: "drop", "hold"): a
// simulated QP and a 24-bit PSN.
func ruleQP(kind string, qp verbs.QP, psn uint32) (*QP, error) {
	q, ok := qp.(*QP)
	if !ok || q == nil {
		return nil, fmt.Errorf("sim: %s rule: not a simulated QP", kind)
	}
	if psn > psnMask {
		return nil, fmt.Errorf("sim: %s rule: psn %#x exceeds 24 bits", kind, psn)
	}
	return q, nil
}

// matchDrop applies (and consumes) a PSN drop rule matching p.
func (f *Fabric) matchDrop(p *packet) bool {
	var req *QP
	if p.kind == pktRequest {
		req = p.owner
	} else {
		req = p.dst.hca.qps[p.dqpn]
	}
	for i, d := range f.drops {
		if d.qp != req || d.resp != p.kind.isResponse() {
			continue
		}
		if x := psnDiff(d.psn, p.psn); x >= 0 && x < int32(p.npkts) {
			f.drops = append(f.drops[:i], f.drops[i+1:]...)
			return true
		}
	}
	return false
}

// psnHold is a one-shot rule holding the request of requester QP qp whose
// PSN range holds psn in the fabric until virtual time until.
type psnHold struct {
	qp    *QP
	psn   uint32
	until time.Duration
	next  bool // any PSN: the next request qp puts on the wire (HoldNext)
}

// HoldRequest holds in the fabric, once, the next request of requester qp
// whose PSN range holds psn, and delivers it at virtual time until (or
// when it would have arrived, if that is later): a packet delayed in a
// switch buffer, as SetDelay delays every packet of a port, but one
// chosen packet and for as long as a test needs. The requester hears
// nothing and retransmits at its local ACK timeout, as for a lost packet;
// the held packet arrives afterwards, a stale copy carrying the payload
// it was sent with, at whatever the destination QP is by then: a later
// incarnation of it after a reset takes or rejects it by its PSN alone,
// as an HCA does (packets carry no incarnation).
func (f *Fabric) HoldRequest(qp verbs.QP, psn uint32, until time.Duration) error {
	q, err := ruleQP("hold", qp, psn)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holds = append(f.holds, psnHold{qp: q, psn: psn, until: until})
	return nil
}

// HoldNext holds in the fabric, once, the next request requester qp puts
// on the wire, whatever its PSN, and delivers it at virtual time until
// (or its normal arrival, if later), as HoldRequest does: for a test that
// cannot know the PSN the QP will send next (a QP about to be reset and
// connected with a PSN drawn then).
func (f *Fabric) HoldNext(qp verbs.QP, until time.Duration) error {
	q, err := ruleQP("hold", qp, 0)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holds = append(f.holds, psnHold{qp: q, until: until, next: true})
	return nil
}

// matchHold applies (and consumes) a hold rule matching p: the time p is
// to arrive at, at the earliest.
func (f *Fabric) matchHold(p *packet) (time.Duration, bool) {
	if p.kind != pktRequest {
		return 0, false
	}
	for i, h := range f.holds {
		if x := psnDiff(h.psn, p.psn); h.qp == p.owner && (h.next || x >= 0 && x < int32(p.npkts)) {
			f.holds = append(f.holds[:i], f.holds[i+1:]...)
			return h.until, true
		}
	}
	return 0, false
}

// SetLID gives port p a new base LID (aligned to its LMC), as an SM
// re-sweep does, and raises LID_CHANGE. Peers addressing the old LID lose
// their packets.
func (f *Fabric) SetLID(p *Port, lid uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == nil || p.hca.linkLayer != verbs.LinkLayerInfiniBand || p.leaf == nil {
		return fmt.Errorf("sim: set LID: need a cabled InfiniBand port")
	}
	step := uint16(1) << p.lmc
	if lid == 0 || lid&(step-1) != 0 || int(lid)+int(step) > 0xc000 {
		return fmt.Errorf("sim: set LID %d on %v: must be a unicast LID aligned to 2^LMC=%d", lid, p, step)
	}
	for i := uint16(0); i < step; i++ {
		if o := f.lids[lid+i]; o != nil && o != p {
			return fmt.Errorf("sim: set LID %d on %v: LID %d belongs to %v", lid, p, lid+i, o)
		}
	}
	for i := uint16(0); i < step; i++ {
		delete(f.lids, p.lid+i)
	}
	p.lid = lid
	for i := uint16(0); i < step; i++ {
		f.lids[lid+i] = p
	}
	if p.hca.alive {
		p.hca.raiseDevice(verbs.AsyncEvent{Type: verbs.EventLIDChange, Port: p.num})
	}
	return nil
}

// SetSMLID moves the subnet manager. Only the software SMA drivers (qib,
// hfi1: subn_set_portinfo) raise SM_CHANGE for it, on every active
// InfiniBand port: the rdmavt profile does; mlx4 and mlx5 raise none, nor
// do the strict and mlx5 profiles.
func (f *Fabric) SetSMLID(lid uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if lid == 0 || lid >= 0xc000 {
		return fmt.Errorf("sim: set SM LID %d: not a unicast LID", lid)
	}
	f.smLID = lid
	if f.cfg.Profile != ProfileRdmavt {
		return nil
	}
	for _, h := range f.hosts {
		for _, a := range h.hcas {
			if !a.alive || a.linkLayer != verbs.LinkLayerInfiniBand {
				continue
			}
			for _, p := range a.ports {
				if p.state == verbs.PortActive {
					a.raiseDevice(verbs.AsyncEvent{Type: verbs.EventSMChange, Port: p.num})
				}
			}
		}
	}
	return nil
}
