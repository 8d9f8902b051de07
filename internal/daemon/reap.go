package daemon

import (
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/store"
)

// reapAtStart deals with the entries this node's processes published
// before ibpathd (re)started. A process that ended while no ibpathd
// watched it never detached: its entries would stay for good, and a new
// process given the same key (a reused QP number) would be refused with
// ErrConflict, its QP without layer 2. So every owner of this node named
// in the store is checked (pid and start time, as at hello): a dead one's
// entries are removed (and the removal replicated); a live one is watched
// as an owner that detached (reapLater): it attaches again, or its
// entries go when it ends. Called before the socket serves.
func (d *Daemon) reapAtStart() {
	owners := map[store.Owner]bool{}
	st := d.repl.Store()
	for _, e := range st.QPEntries() {
		owners[e.Owner] = true
	}
	for _, e := range st.MREntries() {
		owners[e.Owner] = true
	}
	log := d.log.With("part", "reap")
	dead, watched := 0, 0
	for o := range owners {
		if o.Node != d.cfg.Node || o.PID <= 0 {
			continue // another node's, or an entry of the schema-0 file (no owner)
		}
		l := log.With("owner_pid", o.PID, "incarnation", o.Incarnation)
		alive, err := ownerproto.Alive(o.PID, o.Incarnation)
		switch {
		case err != nil:
			l.Warn("cannot tell whether an owner lives; its entries are kept", "err", err)
		case !alive:
			n, err := d.repl.RemoveOwner(o)
			if err != nil {
				l.Error("remove the entries of an owner that ended while ibpathd was down", "err", err)
				continue
			}
			dead++
			l.Info("owner ended while ibpathd was down; its entries removed", "entries", n)
		default:
			watched++
			d.wg.Add(1)
			go d.reapLater(&owner{hello: ownerproto.Hello{PID: o.PID, Incarnation: o.Incarnation}}, l)
		}
	}
	if dead+watched > 0 {
		log.Info("owners of the store checked at start", "dead", dead, "alive_watched", watched)
	}
}
