package replica

import (
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
)

// Route names the port a remote QP or region is reached through: its GID
// when non-zero, else its LID.
type Route struct {
	GID verbs.GID
	LID uint16
}

// QPRoute is the route of a default QP key.
func QPRoute(k store.QPKey) Route { return Route{GID: k.GID, LID: k.LID} }

// MRRoute is the route of a default region key.
func MRRoute(k store.MRKey) Route { return Route{GID: k.GID, LID: k.LID} }

// State is a member's liveness as memberlist sees it.
type State int

// Member states.
const (
	StateAlive State = iota
	StateSuspect
	StateDead
	StateLeft
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return "unknown"
}

// Member is one node of the cluster as this node knows it.
type Member struct {
	Name    string
	Addr    string // host:port of its memberlist (and data) endpoint
	State   State
	Self    bool
	GIDs    []verbs.GID
	LIDs    []uint16
	Entries int // entries (QP and MR) this store holds whose owner is on that node
}

type memberInfo struct {
	node      memberlist.Node // copy: Name, Addr, Port
	state     State
	meta      nodeMeta
	deadSince time.Time
}

// directory tracks members and the GID/LID index from memberlist's
// events.
type directory struct {
	mu      sync.RWMutex
	self    string
	members map[string]*memberInfo
	byGID   map[verbs.GID]string
	byLID   map[uint16]string
	onBad   func(name string, err error)
}

func newDirectory(self string, onBad func(string, error)) *directory {
	return &directory{self: self, members: map[string]*memberInfo{}, byGID: map[verbs.GID]string{}, byLID: map[uint16]string{}, onBad: onBad}
}

func (d *directory) unindex(name string) {
	if m := d.members[name]; m != nil {
		for _, g := range m.meta.GIDs {
			if d.byGID[g] == name {
				delete(d.byGID, g)
			}
		}
		for _, l := range m.meta.LIDs {
			if d.byLID[l] == name {
				delete(d.byLID, l)
			}
		}
	}
}

func (d *directory) set(n *memberlist.Node, state State) {
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		d.onBad(n.Name, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unindex(n.Name)
	mi := &memberInfo{node: memberlist.Node{Name: n.Name, Addr: slices.Clone(n.Addr), Port: n.Port}, state: state, meta: meta}
	if old := d.members[n.Name]; old != nil && old.state == StateDead && state == StateDead {
		mi.deadSince = old.deadSince
	} else if state == StateDead {
		mi.deadSince = time.Now()
	}
	d.members[n.Name] = mi
	if state == StateAlive || state == StateSuspect {
		for _, g := range meta.GIDs {
			d.byGID[g] = n.Name
		}
		for _, l := range meta.LIDs {
			d.byLID[l] = n.Name
		}
	}
}

// NotifyJoin, NotifyLeave and NotifyUpdate implement
// memberlist.EventDelegate.
func (d *directory) NotifyJoin(n *memberlist.Node)   { d.set(n, StateAlive) }
func (d *directory) NotifyUpdate(n *memberlist.Node) { d.set(n, StateAlive) }
func (d *directory) NotifyLeave(n *memberlist.Node) {
	st := StateDead
	if n.State == memberlist.StateLeft {
		st = StateLeft
	}
	d.set(n, st)
}

// resolve finds the live member that owns route r: by GID when r has
// one, else (or when the GID is unknown) by LID.
func (d *directory) resolve(r Route) (string, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if r.GID != (verbs.GID{}) {
		if n, ok := d.byGID[r.GID]; ok {
			return n, true
		}
	}
	if r.LID != 0 {
		if n, ok := d.byLID[r.LID]; ok {
			return n, true
		}
	}
	return "", false
}

// holds reports whether member name (in any state: a dead member's
// entries are still its own) advertised route r: r's GID when it has
// one, else its LID.
func (d *directory) holds(name string, r Route) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m := d.members[name]
	if m == nil {
		return false
	}
	if r.GID != (verbs.GID{}) {
		return slices.Contains(m.meta.GIDs, r.GID)
	}
	return r.LID != 0 && slices.Contains(m.meta.LIDs, r.LID)
}

// node returns the address of a member by name, for sending.
func (d *directory) node(name string) (*memberlist.Node, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m := d.members[name]
	if m == nil {
		return nil, false
	}
	n := m.node
	return &n, true
}

// member renders one member; the caller holds d.mu.
func (d *directory) member(m *memberInfo) Member {
	return Member{
		Name:  m.node.Name,
		Addr:  net.JoinHostPort(m.node.Addr.String(), strconv.Itoa(int(m.node.Port))),
		State: m.state,
		Self:  m.node.Name == d.self,
		GIDs:  slices.Clone(m.meta.GIDs),
		LIDs:  slices.Clone(m.meta.LIDs),
	}
}

// failed lists the addresses of members that died (not those that left)
// after since.
func (d *directory) failed(since time.Time) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []string
	for _, m := range d.members {
		if m.state == StateDead && m.deadSince.After(since) {
			out = append(out, net.JoinHostPort(m.node.Addr.String(), strconv.Itoa(int(m.node.Port))))
		}
	}
	slices.Sort(out)
	return out
}
