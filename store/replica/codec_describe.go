package replica

import (
	"encoding/binary"
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// Encoding of the describe messages (layout in codec.go).

func appendRoute(b []byte, rt Route) []byte {
	b = append(b, rt.GID[:]...)
	return binary.BigEndian.AppendUint16(b, rt.LID)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendHCA(b []byte, h HCA) ([]byte, error) {
	if len(h.Ports) > 255 {
		return nil, fmt.Errorf("replica: encode: adapter %s with %d ports (at most 255)", h.Name, len(h.Ports))
	}
	b, err := appendStr(b, h.Name)
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint64(b, h.GUID)
	b = appendBool(b, h.APM)
	b = append(b, byte(len(h.Ports)))
	for _, p := range h.Ports {
		if len(p.GIDs) > 255 {
			return nil, fmt.Errorf("replica: encode: adapter %s port %d with %d GIDs (at most 255)", h.Name, p.Num, len(p.GIDs))
		}
		b = append(b, p.Num, byte(p.State), byte(p.LinkLayer))
		b = binary.BigEndian.AppendUint16(b, p.LID)
		b = append(b, p.LMC, byte(len(p.GIDs)))
		for _, g := range p.GIDs {
			b = append(b, g[:]...)
		}
	}
	return b, nil
}

func appendDescribed(b []byte, m message) ([]byte, error) {
	if m.HCA != nil {
		return appendHCA(append(b, 1), *m.HCA)
	}
	return appendStr(append(b, 0), m.Reason)
}

func (r *reader) route() Route {
	var rt Route
	copy(rt.GID[:], r.take(16))
	rt.LID = r.u16()
	return rt
}

func (r *reader) bool() bool {
	switch v := r.u8(); {
	case v == 1:
		return true
	case v != 0 && r.err == nil:
		r.fail("flag %d, want 0 or 1", v)
	}
	return false
}

// Minimum encoded size of a port (no GIDs).
const minPort = 1 + 1 + 1 + 2 + 1 + 1

func (r *reader) hca() HCA {
	h := HCA{Name: r.str(), GUID: r.u64(), APM: r.bool()}
	n := int(r.u8())
	if r.err == nil && n*minPort > len(r.b) {
		r.fail("%d ports exceed the %d bytes left", n, len(r.b))
		return h
	}
	for i := 0; i < n && r.err == nil; i++ {
		p := HCAPort{Num: r.u8(), State: verbs.PortState(r.u8()), LinkLayer: verbs.LinkLayer(r.u8()), LID: r.u16(), LMC: r.u8()}
		ng := int(r.u8())
		if r.err == nil && ng*16 > len(r.b) {
			r.fail("%d GIDs exceed the %d bytes left", ng, len(r.b))
			return h
		}
		for j := 0; j < ng && r.err == nil; j++ {
			var g verbs.GID
			copy(g[:], r.take(16))
			p.GIDs = append(p.GIDs, g)
		}
		h.Ports = append(h.Ports, p)
	}
	return h
}

func (r *reader) described(m *message) {
	if r.bool() {
		h := r.hca()
		m.HCA = &h
		return
	}
	m.Reason = r.str()
}
