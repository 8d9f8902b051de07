package sim

import "time"

type evKind uint8

const (
	evPacket evKind = iota
	evRetryTimer
	evRNRTimer
	evArm
	evFunc
)

// event is one scheduled happening. Events at the same virtual time run in
// the order they were scheduled (seq), which keeps runs deterministic.
type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	gen  uint32
	qp   *QP
	pkt  *packet
	fn   func()
}

// eventHeap is a binary min-heap of events by (at, seq), kept by value to
// avoid an allocation per event.
type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h *eventHeap) push(ev event) {
	*h = append(*h, ev)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = event{}
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
