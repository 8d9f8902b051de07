package replica

import (
	"fmt"
	"slices"
	"time"

	"github.com/ibpath/ibpath/store"
)

// delegate is the memberlist.Delegate of a Replicator: it serves the
// node's metadata and queues incoming peer messages for the workers.
type delegate Replicator

func (d *delegate) NodeMeta(limit int) []byte {
	d.metaMu.Lock()
	defer d.metaMu.Unlock()
	return slices.Clone(d.meta)
}

// NotifyMsg must not block memberlist's receive loops: the message is
// copied and queued; when the queue is full it is dropped (and counted),
// and anti-entropy repairs what it carried.
func (d *delegate) NotifyMsg(b []byte) {
	r := (*Replicator)(d)
	select {
	case r.inbox <- slices.Clone(b):
	case <-r.stop:
	default:
		r.stats.bad.Add(1)
		r.log.Warn("replica: inbox full, peer message dropped")
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

func (r *Replicator) worker() {
	defer r.wg.Done()
	for {
		select {
		case <-r.stop:
			return
		case b := <-r.inbox:
			m, err := decode(b)
			if err != nil {
				r.stats.bad.Add(1)
				r.log.Warn("replica: undecodable peer message", "err", err)
				continue
			}
			if err := r.replay.check(m, r.cfg.Name, time.Now()); err != nil {
				r.stats.replays.Add(1)
				r.log.Warn("replica: peer message refused", "from", m.From, "type", m.Type, "err", err)
				continue
			}
			r.handle(m)
		}
	}
}

func (r *Replicator) handle(m message) {
	switch m.Type {
	case msgPush, msgPulled, msgRepair:
		m.Records = r.admit(m, m.Type == msgPush)
	}
	switch m.Type {
	case msgPush:
		if _, err := r.apply(m.Records); err != nil {
			r.log.Error("replica: apply push", "from", m.From, "err", err)
			return
		}
		r.stats.pushesReceived.Add(1)
		r.stats.lag(time.Duration(time.Now().UnixNano() - m.WrittenAt))
	case msgPull:
		r.reply(m.From, msgPulled, m.ID, r.records(m.Refs))
	case msgPulled:
		r.pullMu.Lock()
		ch := r.pulls[m.ID]
		r.pullMu.Unlock()
		if ch != nil {
			select {
			case ch <- m.Records:
			default:
			}
		}
	case msgDigests:
		r.onDigests(m)
	case msgStamps:
		r.onStamps(m)
	case msgWant:
		r.reply(m.From, msgRepair, 0, r.records(m.Refs))
	case msgDescribe:
		r.onDescribe(m)
	case msgDescribed:
		r.onDescribed(m)
	case msgRepair:
		n, err := r.apply(m.Records)
		if err != nil {
			r.log.Error("replica: apply repair", "from", m.From, "err", err)
			return
		}
		r.stats.repairs.Add(uint64(n))
	}
}

// admit keeps the records of m that their owner's node may have written:
// the key's route (the port of the default QP or region) is one that
// node advertises, as a node publishes only keys of its own routes; a
// push comes from that node itself (repairs and pulled records may come
// from any node that holds a copy). The rest are refused, counted and
// logged: a node that let a local process publish under another node's
// route, or a message whose records another node wrote, changes nothing
// here.
func (r *Replicator) admit(m message, direct bool) []store.Record {
	var bad []string
	out := slices.DeleteFunc(m.Records, func(rec store.Record) bool {
		route := Route{GID: rec.Ref.GID, LID: rec.Ref.LID}
		switch {
		case direct && rec.Owner.Node != m.From:
			bad = append(bad, fmt.Sprintf("%v of owner %s pushed by %s", rec.Ref.Kind, rec.Owner, m.From))
		case !r.dir.holds(rec.Owner.Node, route):
			bad = append(bad, fmt.Sprintf("%v of owner %s: its node does not advertise %s", rec.Ref.Kind, rec.Owner, route))
		default:
			return false
		}
		return true
	})
	if len(bad) > 0 {
		r.stats.recordsRefused.Add(uint64(len(bad)))
		r.log.Warn("replica: records refused", "from", m.From, "type", m.Type, "refused", len(bad), "first", bad[0])
	}
	return out
}

// records collects what the store holds for refs.
func (r *Replicator) records(refs []store.Ref) []store.Record {
	out := make([]store.Record, 0, len(refs))
	for _, ref := range refs {
		if rec, ok := r.st.Record(ref); ok {
			out = append(out, rec)
		}
	}
	return out
}

// reply sends records (in chunks) as messages of type t.
func (r *Replicator) reply(to string, t msgType, id uint64, recs []store.Record) {
	if t == msgRepair && len(recs) == 0 {
		return
	}
	for c := range slices.Chunk(recs, maxPerMsg) {
		if err := r.send(to, message{Type: t, ID: id, Records: c}); err != nil {
			r.log.Warn("replica: reply failed", "peer", to, "err", err)
			return
		}
	}
	if len(recs) == 0 { // an empty answer to a pull
		if err := r.send(to, message{Type: t, ID: id}); err != nil {
			r.log.Warn("replica: reply failed", "peer", to, "err", err)
		}
	}
}
