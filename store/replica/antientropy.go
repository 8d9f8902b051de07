package replica

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/store"
)

// Anti-entropy, every AntiEntropyInterval, with one random live peer:
//
//	A -> B  digests: per origin node, count and hash of its stamps
//	B -> A  stamps: for every origin whose digests differ, B's stamps
//	A -> B  repair: A's records that B lacks or holds older
//	A -> B  want: refs A lacks or holds older; B answers with a repair
//
// Only differing origins are listed and only differing records move.
// Each round also collects tombstones older than TombstoneTTL and tries
// to rejoin failed members (and the seeds while alone), which is how a
// healed partition or a restarted node comes back.

func (r *Replicator) antiEntropyLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.AntiEntropyInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.round()
		}
	}
}

func (r *Replicator) round() {
	if n, err := r.st.CollectTombstones(time.Now().Add(-r.cfg.TombstoneTTL)); err != nil {
		r.log.Error("replica: collect tombstones", "err", err)
	} else if n > 0 {
		r.log.Info("replica: collected tombstones", "count", n)
	}
	r.reconnect()
	var peers []*memberlist.Node
	for _, n := range r.ml.Members() {
		if n.Name != r.cfg.Name && n.State == memberlist.StateAlive {
			peers = append(peers, n)
		}
	}
	r.rememberPeers(peers)
	if len(peers) == 0 {
		return
	}
	p := peers[rand.IntN(len(peers))]
	r.stats.rounds.Add(1)
	if err := r.send(p.Name, message{Type: msgDigests, Digests: r.st.Digests()}); err != nil {
		r.log.Debug("replica: anti-entropy digest send failed", "peer", p.Name, "err", err)
	}
}

// reconnect rejoins members that failed within TombstoneTTL, and the
// seeds and the remembered peers while no other member is alive.
func (r *Replicator) reconnect() {
	addrs := r.dir.failed(time.Now().Add(-r.cfg.TombstoneTTL))
	if r.ml.NumMembers() <= 1 {
		addrs = append(addrs, r.cfg.Seeds...)
		addrs = append(addrs, r.rememberedPeers()...)
	}
	if len(addrs) == 0 {
		return
	}
	if n, err := r.ml.Join(addrs); err != nil && n == 0 {
		r.log.Debug("replica: rejoin failed", "addrs", addrs, "err", err)
	}
}

// onDigests answers a peer's digests with our stamps of every origin
// whose digest differs.
func (r *Replicator) onDigests(m message) {
	mine := map[string]store.Digest{}
	for _, d := range r.st.Digests() {
		mine[d.Origin] = d
	}
	theirs := map[string]store.Digest{}
	for _, d := range m.Digests {
		theirs[d.Origin] = d
	}
	var origins []string
	for o, d := range mine {
		if t, ok := theirs[o]; !ok || t.Count != d.Count || t.Hash != d.Hash {
			origins = append(origins, o)
		}
	}
	for o := range theirs {
		if _, ok := mine[o]; !ok {
			origins = append(origins, o)
		}
	}
	if len(origins) == 0 {
		return
	}
	slices.Sort(origins)
	var stamps []store.Stamp
	for _, o := range origins {
		stamps = append(stamps, r.st.Stamps(o)...)
	}
	if err := r.send(m.From, message{Type: msgStamps, Origins: origins, Stamps: stamps}); err != nil {
		r.log.Debug("replica: anti-entropy stamps send failed", "peer", m.From, "err", err)
	}
}

// onStamps compares a peer's stamps of the listed origins with ours: it
// sends what the peer lacks or holds older, and asks for the rest.
func (r *Replicator) onStamps(m message) {
	theirs := make(map[store.Ref]store.Stamp, len(m.Stamps))
	for _, s := range m.Stamps {
		theirs[s.Ref] = s
	}
	var give []store.Record
	for _, o := range m.Origins {
		for _, s := range r.st.Stamps(o) {
			if t, ok := theirs[s.Ref]; !ok || s.Newer(t) {
				if rec, ok := r.st.Record(s.Ref); ok {
					give = append(give, rec)
				}
			}
		}
	}
	var want []store.Ref
	for _, t := range m.Stamps {
		if cur, ok := r.st.Record(t.Ref); !ok || t.Newer(cur.Stamp) {
			want = append(want, t.Ref)
		}
	}
	r.reply(m.From, msgRepair, 0, give)
	for c := range slices.Chunk(want, maxPerMsg) {
		if err := r.send(m.From, message{Type: msgWant, Refs: c}); err != nil {
			r.log.Debug("replica: anti-entropy want send failed", "peer", m.From, "err", err)
			return
		}
	}
}
