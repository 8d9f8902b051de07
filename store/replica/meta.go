package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/verbs"
)

// Node metadata, carried by memberlist with every alive message:
//
//	version u8 (=1), nGID u8, GID[16] × nGID, nLID u8, LID u16 × nLID
//
// memberlist limits it to 512 bytes (memberlist.MetaMaxSize): 3 + 16×GIDs
// + 2×LIDs must fit, e.g. 24 GIDs and 60 LIDs.

const metaVersion = 1

// ErrMetaTooLarge: the node's GIDs and LIDs do not fit memberlist's
// 512-byte node metadata.
var ErrMetaTooLarge = errors.New("replica: node metadata too large")

type nodeMeta struct {
	GIDs []verbs.GID
	LIDs []uint16
}

func encodeMeta(m nodeMeta) ([]byte, error) {
	size := 3 + 16*len(m.GIDs) + 2*len(m.LIDs)
	if len(m.GIDs) > 255 || len(m.LIDs) > 255 || size > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d GIDs and %d LIDs need %d bytes, memberlist allows %d",
			ErrMetaTooLarge, len(m.GIDs), len(m.LIDs), size, memberlist.MetaMaxSize)
	}
	b := make([]byte, 0, size)
	b = append(b, metaVersion, byte(len(m.GIDs)))
	for _, g := range m.GIDs {
		b = append(b, g[:]...)
	}
	b = append(b, byte(len(m.LIDs)))
	for _, l := range m.LIDs {
		b = binary.BigEndian.AppendUint16(b, l)
	}
	return b, nil
}

func decodeMeta(b []byte) (nodeMeta, error) {
	if len(b) > memberlist.MetaMaxSize {
		return nodeMeta{}, fmt.Errorf("%w: metadata of %d bytes", errDecode, len(b))
	}
	r := &reader{b: b}
	if v := r.u8(); r.err == nil && v != metaVersion {
		r.fail("metadata version %d", v)
	}
	var m nodeMeta
	n := int(r.u8())
	for i := 0; i < n && r.err == nil; i++ {
		var g verbs.GID
		copy(g[:], r.take(16))
		m.GIDs = append(m.GIDs, g)
	}
	n = int(r.u8())
	for i := 0; i < n && r.err == nil; i++ {
		m.LIDs = append(m.LIDs, r.u16())
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing metadata bytes", len(r.b))
	}
	if r.err != nil {
		return nodeMeta{}, r.err
	}
	return m, nil
}
