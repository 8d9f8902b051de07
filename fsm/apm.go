package fsm

import "fmt"

// PathRef names one path of a QP: the local port and the LMC path bits
// (the source path bits, and the offset of the peer's DLID).
type PathRef struct {
	Port uint8
	Bits uint8
}

func (p PathRef) String() string {
	if p.Port == 0 {
		return "-"
	}
	if p.Bits == 0 {
		return fmt.Sprintf("port %d", p.Port)
	}
	return fmt.Sprintf("port %d+%d", p.Port, p.Bits)
}

// APMState is the layer-1 state of one QP.
type APMState uint8

// Layer-1 states.
const (
	// APMUnprotected: no armed alternate (none loaded yet, none healthy, or
	// the last one was used by a migration).
	APMUnprotected APMState = iota
	// APMRearming: an alternate is loaded with REARM; ARMED not yet seen.
	APMRearming
	// APMArmed: the HCA can migrate to the alternate by itself.
	APMArmed
	// APMAwaitPeer: ibpath migrated the QP itself and waits for the peer
	// to follow before re-arming. The QP stays MIGRATED meanwhile, so its
	// packets carry MigReq and make the peer's HCA migrate; re-arming too
	// early would clear MigReq and the peer, still on the old path, would
	// drop them.
	APMAwaitPeer
	// APMHandedOver: layer 1 cannot help; the QP belongs to the next layer
	// (or its error surfaces). Final until the QP is reset.
	APMHandedOver
	// APMUnsupported: APM is impossible for this QP (RoCE, or a device
	// without IBV_DEVICE_AUTO_PATH_MIG). Final.
	APMUnsupported
)

func (s APMState) String() string {
	switch s {
	case APMUnprotected:
		return "unprotected"
	case APMRearming:
		return "rearming"
	case APMArmed:
		return "armed"
	case APMAwaitPeer:
		return "awaiting-peer"
	case APMHandedOver:
		return "handed-over"
	case APMUnsupported:
		return "unsupported"
	}
	return fmt.Sprintf("APMState(%d)", uint8(s))
}

// Failback says what to do when the path a QP started on (its home)
// becomes healthy again after a migration.
type Failback uint8

// Failback policies.
const (
	// FailbackAuto loads the home path as the alternate and migrates back
	// once it has been armed for the hold-down time.
	FailbackAuto Failback = iota
	// FailbackManual loads the home path as the alternate and waits for an
	// operator's migrate.
	FailbackManual
)

func (f Failback) String() string {
	if f == FailbackManual {
		return "manual"
	}
	return "auto"
}

// ParseFailback reads "auto" or "manual".
func ParseFailback(s string) (Failback, error) {
	switch s {
	case "auto":
		return FailbackAuto, nil
	case "manual":
		return FailbackManual, nil
	}
	return 0, fmt.Errorf("fsm: failback %q: want auto or manual", s)
}

// APMEventKind says what happened to a QP.
type APMEventKind uint8

// Events of the path-migration machine.
const (
	EvArmRequested     APMEventKind = iota // arm the QP (at connect, or by an operator)
	EvAltLoaded                            // the driver loaded Path as alternate with REARM
	EvNoAlternate                          // no healthy alternate exists (Reason)
	EvArmedObserved                        // ibv_query_qp reports ARMED
	EvPathMigrated                         // IBV_EVENT_PATH_MIG; Path is the QP's primary now
	EvPathMigErr                           // IBV_EVENT_PATH_MIG_ERR
	EvPortDown                             // PORT_ERR on Port
	EvPortUp                               // PORT_ACTIVE on Port
	EvMigrateRequested                     // an operator asks to move to the alternate
	EvMigrated                             // the driver's ibv_modify_qp(MIGRATED) succeeded
	EvPeerFollowed                         // traffic proves the peer moved to the new path
	EvResync                               // the QP's real primary is Path and it is not armed
	EvProbe                                // periodic: look for an alternate (ends awaiting-peer)
	EvFailbackDue                          // the home alternate has been armed long enough
	EvQPError                              // error completion, QP or device fatal (Reason)
	EvUnsupported                          // APM is impossible (Reason)
	EvAltKept                              // the QP stays ARMED on Path: the device took no new alternate (Want) while ARMED
)

var evNames = [...]string{"arm-requested", "alt-loaded", "no-alternate", "armed-observed",
	"path-migrated", "path-mig-err", "port-down", "port-up", "migrate-requested", "migrated",
	"peer-followed", "resync", "probe", "failback-due", "qp-error", "unsupported", "alt-kept"}

func (k APMEventKind) String() string {
	if int(k) < len(evNames) {
		return evNames[k]
	}
	return fmt.Sprintf("APMEventKind(%d)", uint8(k))
}

// APMEvent is one input of the machine.
type APMEvent struct {
	Kind   APMEventKind
	Path   PathRef // EvAltLoaded, EvPathMigrated, EvResync, EvAltKept
	Want   PathRef // EvAltKept: the alternate that was chosen
	Port   uint8   // EvPortDown, EvPortUp
	Reason string  // EvNoAlternate, EvQPError, EvUnsupported
}

// APMActionKind is work the driver must do.
type APMActionKind uint8

// Actions of the path-migration machine.
const (
	// ActLoadAlternate: choose the best healthy alternate (Prefer first if
	// set and healthy), load it with IBV_QP_ALT_PATH (and REARM when the
	// QP is MIGRATED: REARM is refused on a QP in REARM or ARMED), and
	// answer with EvAltLoaded, EvNoAlternate, or EvAltKept when the QP is
	// ARMED and the device keeps its alternate.
	ActLoadAlternate APMActionKind = iota
	// ActPollArmed: query the QP with backoff until ARMED, then answer
	// with EvArmedObserved.
	ActPollArmed
	// ActMigrate: ibv_modify_qp(PATH_MIG_STATE=MIGRATED), then answer with
	// EvMigrated (or EvResync with the QP's real path if it failed).
	ActMigrate
	// ActHandOver: give the QP to the next layer.
	ActHandOver
)

func (k APMActionKind) String() string {
	switch k {
	case ActLoadAlternate:
		return "load-alternate"
	case ActPollArmed:
		return "poll-armed"
	case ActMigrate:
		return "migrate"
	case ActHandOver:
		return "hand-over"
	}
	return fmt.Sprintf("APMActionKind(%d)", uint8(k))
}

// APMAction is one output of the machine.
type APMAction struct {
	Kind      APMActionKind
	Reason    string
	Prefer    PathRef // ActLoadAlternate: the home path, when it is not the primary
	HasPrefer bool
}

// APM is the path-migration machine of one QP. It is pure: Step takes an
// event and returns the actions to perform; the caller performs them and
// feeds their outcome back as events.
type APM struct {
	State    APMState
	Primary  PathRef // the path traffic uses now
	Alt      PathRef // the loaded alternate (HasAlt)
	HasAlt   bool
	Home     PathRef // the path the QP was connected on
	Failback Failback
	Reason   string // why the QP is unprotected, handed over or unsupported
	down     uint64 // ports known to be down, as 1<<port
}

// NewAPM returns the machine of a QP connected on home.
func NewAPM(home PathRef, fb Failback) *APM {
	return &APM{State: APMUnprotected, Primary: home, Home: home, Failback: fb, Reason: "not armed yet"}
}

// PortDown reports whether the machine knows port p to be down.
func (m *APM) PortDown(p uint8) bool { return p < 64 && m.down&(1<<p) != 0 }

// WantsFailback reports whether the QP runs away from home with the home
// path armed as its alternate, so EvFailbackDue would migrate it back.
func (m *APM) WantsFailback() bool {
	return m.State == APMArmed && m.Failback == FailbackAuto && m.HasAlt && m.Alt == m.Home &&
		m.Primary != m.Home && !m.PortDown(m.Home.Port)
}

// Step applies one event.
func (m *APM) Step(ev APMEvent) []APMAction {
	switch ev.Kind {
	case EvPortDown:
		if ev.Port < 64 {
			m.down |= 1 << ev.Port
		}
	case EvPortUp:
		if ev.Port < 64 {
			m.down &^= 1 << ev.Port
		}
	}
	if m.State == APMHandedOver || m.State == APMUnsupported {
		return nil
	}
	switch ev.Kind {
	case EvUnsupported:
		m.State, m.HasAlt, m.Reason = APMUnsupported, false, ev.Reason
		return nil
	case EvQPError:
		return m.handOver(ev.Reason)
	case EvPathMigErr:
		return m.handOver("PATH_MIG_ERR: the alternate path failed too")
	case EvArmRequested, EvProbe:
		switch {
		case m.State == APMUnprotected:
		case ev.Kind == EvProbe && m.State == APMAwaitPeer:
			return m.load("re-arm after waiting for the peer")
		case ev.Kind == EvProbe && m.State == APMArmed && m.homeMissing():
		default:
			return nil
		}
		return m.load("arm")
	case EvPeerFollowed:
		if m.State != APMAwaitPeer {
			return nil
		}
		return m.load("re-arm: the peer followed")
	case EvAltLoaded:
		m.Alt, m.HasAlt, m.State, m.Reason = ev.Path, true, APMRearming, ""
		return []APMAction{{Kind: ActPollArmed}}
	case EvNoAlternate:
		m.HasAlt, m.State, m.Reason = false, APMUnprotected, ev.Reason
		if m.PortDown(m.Primary.Port) {
			return m.handOver("primary port down and no alternate: " + ev.Reason)
		}
		return nil
	case EvArmedObserved:
		if m.State != APMRearming {
			return nil
		}
		m.State = APMArmed
		if m.PortDown(m.Primary.Port) && m.Alt.Port != m.Primary.Port {
			return m.migrate("primary port down")
		}
		return nil
	case EvPathMigrated:
		if ev.Path == m.Primary {
			return nil // our own migration, already applied
		}
		// The HCA migrated by itself. A requester's HCA raises PATH_MIG the
		// moment it migrates (qib_migrate_qp), before the peer has moved:
		// treat it as a migration of our own and wait for the peer before
		// re-arming, which would clear MigReq. (A responder's PATH_MIG
		// means the peer moved first; waiting costs it only the wait.)
		m.Primary, m.HasAlt, m.State, m.Reason = ev.Path, false, APMAwaitPeer, ""
		return nil
	case EvAltKept:
		return m.altKept(ev)
	case EvResync:
		m.Primary, m.HasAlt, m.State = ev.Path, false, APMUnprotected
		return m.load("re-arm after resync")
	case EvMigrateRequested:
		if m.State != APMArmed {
			return nil
		}
		return m.migrate("operator request")
	case EvFailbackDue:
		if !m.WantsFailback() {
			return nil
		}
		return m.migrate("failback to the home path")
	case EvMigrated:
		if !m.HasAlt {
			return nil
		}
		m.Primary, m.Alt = m.Alt, m.Primary
		m.HasAlt, m.State, m.Reason = false, APMAwaitPeer, ""
		return nil
	case EvPortDown:
		return m.portDown(ev.Port)
	case EvPortUp:
		if m.State == APMAwaitPeer {
			return nil // re-arming now would clear MigReq before the peer follows
		}
		if m.State == APMUnprotected || (ev.Port == m.Home.Port && m.homeMissing()) {
			return m.load("port up")
		}
		if m.HasAlt && m.Alt.Port == m.Primary.Port && ev.Port != m.Primary.Port {
			// The alternate shares the primary's port (an LMC path) and would
			// die with it; another port is back, so look again. An
			// alternate can only arm while the primary still carries packets.
			return m.load("another port is up")
		}
	}
	return nil
}

// altKept: the QP is ARMED on ev.Path and the device refused the new
// alternate ev.Want (it takes none while ARMED). The armed alternate stays
// in use; if it is dead the QP is unprotected until its port returns or
// the QP migrates. When ev.Want is clearly better (home, for auto
// failback; another port, where the armed alternate shares the primary's)
// the QP hops to the armed alternate, after which the wanted path loads
// with REARM as a MIGRATED QP allows.
func (m *APM) altKept(ev APMEvent) []APMAction {
	m.Alt, m.HasAlt = ev.Path, true
	if m.PortDown(ev.Path.Port) {
		m.HasAlt, m.State = false, APMUnprotected
		m.Reason = fmt.Sprintf("ARMED on the alternate %v, whose port is down; the device takes no new alternate while ARMED", ev.Path)
		if m.PortDown(m.Primary.Port) {
			return m.handOver("primary port down and no alternate: the armed alternate's port is down too, and the device takes no new alternate while ARMED")
		}
		return nil
	}
	m.State, m.Reason = APMArmed, ""
	if m.PortDown(m.Primary.Port) && m.Alt.Port != m.Primary.Port {
		return m.migrate("primary port down")
	}
	if ev.Want != ev.Path && !m.PortDown(ev.Want.Port) {
		switch {
		case ev.Want == m.Home && m.Failback == FailbackAuto && m.Primary != m.Home:
			return m.migrate("hop to the armed alternate, so that home can be loaded (no new alternate while ARMED)")
		case m.Alt.Port == m.Primary.Port && ev.Want.Port != m.Primary.Port:
			return m.migrate("hop to the armed alternate, so that another port can be loaded (no new alternate while ARMED)")
		}
	}
	return nil
}

// homeMissing: the QP runs away from home and home is not its alternate.
func (m *APM) homeMissing() bool {
	return m.Primary != m.Home && (!m.HasAlt || m.Alt != m.Home) && !m.PortDown(m.Home.Port)
}

func (m *APM) portDown(p uint8) []APMAction {
	switch {
	case m.Primary.Port == p:
		if m.HasAlt && m.Alt.Port != p {
			if m.State == APMArmed {
				return m.migrate("primary port down") // proactive: do not wait for RC timeouts
			}
			return nil // REARM: migrate as soon as ARMED is seen
		}
		// No alternate, or it shares the dead port (an LMC path).
		m.HasAlt, m.State = false, APMUnprotected
		return m.load("primary port down")
	case m.HasAlt && m.Alt.Port == p:
		m.HasAlt, m.State = false, APMUnprotected
		return m.load("alternate port down")
	}
	return nil
}

func (m *APM) load(reason string) []APMAction {
	if m.State != APMArmed && m.State != APMRearming {
		m.State = APMUnprotected
	}
	a := APMAction{Kind: ActLoadAlternate, Reason: reason}
	if m.Primary != m.Home && !m.PortDown(m.Home.Port) {
		a.Prefer, a.HasPrefer = m.Home, true
	}
	return []APMAction{a}
}

func (m *APM) migrate(reason string) []APMAction {
	return []APMAction{{Kind: ActMigrate, Reason: reason}}
}

func (m *APM) handOver(reason string) []APMAction {
	m.State, m.HasAlt, m.Reason = APMHandedOver, false, reason
	return []APMAction{{Kind: ActHandOver, Reason: reason}}
}
