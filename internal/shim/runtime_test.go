package shim

import (
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

func TestRuntimeLayerDecisions(t *testing.T) {
	cfg, _ := FromEnv(env(nil))
	r := NewRuntime(cfg, nil)
	const ib, roce = uintptr(1), uintptr(2)
	r.Opened(ib, "mlx5_0", []Port{{Num: 1, LinkLayer: verbs.LinkLayerInfiniBand, LID: 3}, {Num: 2, LinkLayer: verbs.LinkLayerInfiniBand, LID: 4}}, nil)
	r.Opened(roce, "rxe0", []Port{{Num: 1, LinkLayer: verbs.LinkLayerEthernet}}, nil)
	if !r.Created(ib, QPInfo{QPN: 0x10, Type: verbs.QPTRC}) {
		t.Fatal("an RC QP is not protected")
	}
	if r.Created(ib, QPInfo{QPN: 0x11, Type: verbs.QPTUD}) {
		t.Fatal("a UD QP is protected")
	}
	if r.Created(ib, QPInfo{QPN: 0x12, Type: verbs.QPTRC, SRQ: true}) {
		t.Fatal("a QP on an SRQ the shim does not follow is protected")
	}
	if !r.Created(ib, QPInfo{QPN: 0x14, Type: verbs.QPTRC, SRQ: true, SRQFollowed: true}) {
		t.Fatal("a QP on an SRQ the shim follows is not protected")
	}
	r.Created(roce, QPInfo{QPN: 0x21, Type: verbs.QPTRC, SRQ: true})
	if r.Created(roce, QPInfo{QPN: 0x22, Type: verbs.QPTXRCSend}) {
		t.Fatal("an XRC QP is protected")
	}
	if r.Created(uintptr(9), QPInfo{QPN: 0x13, Type: verbs.QPTRC}) {
		t.Fatal("a QP of an unknown context is protected")
	}
	r.Created(roce, QPInfo{QPN: 0x20, Type: verbs.QPTRC})
	rep := &shimtest.Reports{}
	r.SetReporter(rep)
	if len(rep.Reported()) != 7 {
		t.Fatalf("attach reported %d QPs, want the 7 known", len(rep.Reported()))
	}
	for _, c := range []struct {
		ctx  uintptr
		qpn  uint32
		apm  string
		why  string
		port uint8
	}{
		{ib, 0x10, "unprotected", "layer 1 did not take the QP", 1},
		{roce, 0x20, "unsupported", "RoCE has no automatic path migration", 1},
		// layer 1's word on RoCE does not hide why layer 2 does not
		// protect the QP
		{roce, 0x21, "unsupported", "shared receive queue the shim does not follow", 1},
		{roce, 0x22, "-", "XRC send QP: XRC passes through", 1},
	} {
		r.Modified(c.ctx, Modify{QPN: c.qpn, Mask: verbs.QPAttrState | verbs.QPAttrPort, State: verbs.QPSInit, Port: c.port})
		r.Modified(c.ctx, Modify{QPN: c.qpn, Mask: verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrDestQPN, State: verbs.QPSRTR, DLID: 9, DestQPN: 0x99})
		var got status.QP
		for _, q := range r.QPs() {
			if q.QPN == c.qpn {
				got = q
			}
		}
		if got.APM != c.apm || !strings.Contains(got.Reason, c.why) || got.Remote.String() != "lid 9 qpn 0x99" || got.Primary.String() != "port 1" {
			t.Errorf("QP %#x: %+v", c.qpn, got)
		}
	}
	// A failed modify changes nothing.
	r.Modified(ib, Modify{QPN: 0x10, Mask: verbs.QPAttrPort, Port: 2, Err: 22})
	for _, q := range r.QPs() {
		if q.QPN == 0x10 && q.Port != 1 {
			t.Fatalf("a failed modify was recorded: %+v", q)
		}
	}
	res := r.Command(ownerproto.Command{Op: ownerproto.OpArm, Device: "rxe0", QPN: 0x20})
	if res.OK || !strings.Contains(res.Error, "RoCE") {
		t.Fatalf("arm on RoCE: %+v", res)
	}
	if res := r.Command(ownerproto.Command{Op: ownerproto.OpArm, Device: "rxe0", QPN: 0x77}); res.OK || !strings.Contains(res.Error, "no such QP") {
		t.Fatalf("arm of an unknown QP: %+v", res)
	}
	r.Destroyed(roce, 0x20)
	if gone := rep.Gone(); len(gone) != 1 || gone[0] != 0x20 {
		t.Fatalf("gone %v", gone)
	}
	r.Closed(ib)
	r.Closed(roce)
	if len(r.QPs()) != 0 {
		t.Fatalf("QPs left after close: %+v", r.QPs())
	}
	// APM off by configuration.
	r2 := NewRuntime(Config{Record: true}, nil)
	r2.Opened(ib, "mlx5_0", []Port{{Num: 1, LinkLayer: verbs.LinkLayerInfiniBand}}, nil)
	r2.Created(ib, QPInfo{QPN: 1, Type: verbs.QPTRC})
	r2.Modified(ib, Modify{QPN: 1, Mask: verbs.QPAttrState | verbs.QPAttrPort, State: verbs.QPSRTR, Port: 1})
	if q := r2.QPs()[0]; q.APM != "off" || !strings.Contains(q.Reason, EnvAPM) {
		t.Fatalf("APM off: %+v", q)
	}
}

// TestRuntimeReportsPathObjects: the application's modifies make the
// status's paths and remote end: the device and port of INIT, the path
// bits and (on a global route) the GID index of RTR's address vector,
// the remote LID, or GID, and QPN.
func TestRuntimeReportsPathObjects(t *testing.T) {
	cfg, _ := FromEnv(env(nil))
	r := NewRuntime(cfg, nil)
	const ib, roce = uintptr(1), uintptr(2)
	r.Opened(ib, "mlx5_0", []Port{{Num: 1, LinkLayer: verbs.LinkLayerInfiniBand, LID: 4}, {Num: 2, LinkLayer: verbs.LinkLayerInfiniBand, LID: 8}}, nil)
	r.Opened(roce, "rxe0", []Port{{Num: 1, LinkLayer: verbs.LinkLayerEthernet}}, nil)
	r.Created(ib, QPInfo{QPN: 0x10, Type: verbs.QPTRC})
	r.Created(roce, QPInfo{QPN: 0x20, Type: verbs.QPTRC})
	qp := func(qpn uint32) status.QP {
		for _, q := range r.QPs() {
			if q.QPN == qpn {
				return q
			}
		}
		t.Fatalf("no QP %#x", qpn)
		return status.QP{}
	}
	if q := qp(0x10); q.Primary != (status.Path{}) || q.Remote != (status.Remote{}) || q.Home != (status.Path{}) {
		t.Fatalf("a QP not connected has paths: %+v", q)
	}
	r.Modified(ib, Modify{QPN: 0x10, Mask: verbs.QPAttrState | verbs.QPAttrPort, State: verbs.QPSInit, Port: 2})
	r.Modified(ib, Modify{QPN: 0x10, Mask: verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrDestQPN, State: verbs.QPSRTR,
		DLID: 9, DestQPN: 0x99, Attr: verbs.QPAttr{AHAttr: verbs.AHAttr{DLID: 9, SrcPathBits: 1}}})
	q := qp(0x10)
	want := status.Path{Device: "mlx5_0", Port: 2, PathBits: 1}
	if q.Primary != want || q.Home != want || q.Port != 2 || q.Remote != (status.Remote{LID: 9, QPN: 0x99}) || q.Primary.String() != "port 2+1" {
		t.Fatalf("IB QP: primary %+v home %+v remote %+v; want %+v and lid 9 qpn 0x99", q.Primary, q.Home, q.Remote, want)
	}
	var dgid verbs.GID
	dgid[0], dgid[1], dgid[15] = 0xfe, 0x80, 2
	r.Modified(roce, Modify{QPN: 0x20, Mask: verbs.QPAttrState | verbs.QPAttrPort, State: verbs.QPSInit, Port: 1})
	r.Modified(roce, Modify{QPN: 0x20, Mask: verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrDestQPN, State: verbs.QPSRTR,
		DGID: dgid, Global: true, DestQPN: 0x42, Attr: verbs.QPAttr{AHAttr: verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: dgid, SGIDIndex: 3}}}})
	q = qp(0x20)
	if q.Primary != (status.Path{Device: "rxe0", Port: 1, GIDIndex: 3}) || q.Remote != (status.Remote{GID: "fe80::2", QPN: 0x42}) {
		t.Fatalf("RoCE QP: primary %+v remote %+v; want rxe0 port 1, GID index 3, remote fe80::2 qpn 0x42", q.Primary, q.Remote)
	}
	// RoCE has no APM: no alternate, and its state says so
	if q.Alternate != (status.Path{}) || q.APM != "unsupported" {
		t.Fatalf("RoCE QP: alternate %+v, apm %q", q.Alternate, q.APM)
	}
}
