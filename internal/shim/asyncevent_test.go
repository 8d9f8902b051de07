package shim

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/verbs"
)

// TestKeepAsyncEvent: the fatal QP events of a QP layer 2 carries (armed,
// then failed over) are kept from the application and named in its
// status; CQ_ERR and port events never are; DEVICE_FATAL is kept only
// while layer 2 carries every QP of the context; a QP the application
// closed itself, or one the shim does not know, gets its events as
// without the shim.
func TestKeepAsyncEvent(t *testing.T) {
	_, _, qa, _, _ := exchangeWorld(t, 41, l2opts{}, false)
	x := qa.x
	keep := func(ev verbs.EventType, qpn uint32) bool { return x.rt.AsyncEvent(x.id, ev, qpn, 1) }
	qpn := qa.qp.QPN()
	for _, c := range []struct {
		ev   verbs.EventType
		qpn  uint32
		want bool
	}{
		{verbs.EventQPFatal, qpn, true},
		{verbs.EventQPReqErr, qpn, true},
		{verbs.EventQPAccessErr, qpn, true},
		{verbs.EventCQErr, 0, false},
		{verbs.EventPortErr, 0, false},
		{verbs.EventPathMigErr, qpn, false},
		{verbs.EventCommEst, qpn, false},
		{verbs.EventQPFatal, qpn + 1000, false},
		{verbs.EventDeviceFatal, 0, true},
	} {
		if got := keep(c.ev, c.qpn); got != c.want {
			t.Errorf("%v of QP %#x: kept %v, want %v", c.ev, c.qpn, got, c.want)
		}
	}
	if s := qa.status().KeptEvents; s != "QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, DEVICE_FATAL" {
		t.Errorf("status names the kept events %q", s)
	}
	if x.rt.EventsKept() != 4 || !strings.Contains(x.log.String(), "async event kept from the application") {
		t.Errorf("%d events counted kept; log:\n%s", x.rt.EventsKept(), x.log.String())
	}
	// a QP layer 2 does not carry on the same device: DEVICE_FATAL reaches
	// the application, the carried QP's own events are still kept
	bare := x.addQP(t, qpOpts{noShadow: true})
	if keep(verbs.EventDeviceFatal, 0) {
		t.Error("DEVICE_FATAL kept with a QP layer 2 does not carry")
	}
	if keep(verbs.EventQPFatal, bare.qp.QPN()) || !keep(verbs.EventQPFatal, qpn) {
		t.Error("QP_FATAL: kept for the bare QP, or not for the carried one")
	}
	// the application's own move to ERR leaves the QP to it
	appClose(t, qa)
	if keep(verbs.EventQPFatal, qpn) {
		t.Error("QP_FATAL of a QP the application closed itself was kept")
	}
}

// TestKeepAsyncEventAfterFailover: a QP layer 2 carries on its backup
// keeps its fatal events from the application, so does its dead device.
func TestKeepAsyncEventAfterFailover(t *testing.T) {
	_, _, qa, _, _ := exchangeWorld(t, 42, l2opts{}, true)
	x := qa.x
	if !x.rt.AsyncEvent(x.id, verbs.EventQPFatal, qa.qp.QPN(), 0) || !x.rt.AsyncEvent(x.id, verbs.EventDeviceFatal, 0, 0) {
		t.Fatalf("the fatal events of a failed-over QP reach the application; status %+v", qa.status())
	}
}

// TestAsyncEventFilterC runs the C check of the async event filter
// (cmd/libibpath/asyncev.c, cbench/asyncev_check.c) against a scripted
// ibv_get_async_event: kept events are acknowledged and skipped, the
// others returned untouched and unacknowledged, DEVICE_FATAL kept only
// when the Go side says so, EAGAIN after kept events on a non-blocking fd.
func TestAsyncEventFilterC(t *testing.T) {
	bin := buildCCheckSrcs(t, "asyncev_check", "asyncev.c")
	if out, err := exec.Command(bin).CombinedOutput(); err != nil || !strings.Contains(string(out), "asyncev_check: ok") {
		t.Fatalf("asyncev_check: %v\n%s", err, out)
	}
}

// TestKeptEventsGivenBack: the fatal events kept while layer 2 carried a
// QP (its QP_FATAL, and the device's DEVICE_FATAL) go back to the
// application, each once, when its failover surfaces the error (an
// atomic was outstanding): plain verbs would have shown them. A failover
// that comes through gives nothing back.
func TestKeptEventsGivenBack(t *testing.T) {
	_, qa, _ := atomicRun(t, true, func(q *appQP) {
		x := q.x
		if !x.rt.AsyncEvent(x.id, verbs.EventQPFatal, q.qp.QPN(), 0) || !x.rt.AsyncEvent(x.id, verbs.EventDeviceFatal, 0, 0) ||
			!x.rt.AsyncEvent(x.id, verbs.EventQPFatal, q.qp.QPN(), 0) {
			t.Fatal("the fatal events of an armed QP were not kept")
		}
	})
	x := qa.x
	want := []shimtest.GivenBack{{Ctx: x.id, QPN: qa.qp.QPN(), Ev: verbs.EventQPFatal}, {Ctx: x.id, Ev: verbs.EventDeviceFatal}}
	if got := x.hp.Given(); !slices.Equal(got, want) {
		t.Fatalf("given back %+v, want %+v", got, want)
	}
	if x.rt.EventsGivenBack() != 2 || x.logLine("async event given back", "QP_FATAL") == "" {
		t.Fatalf("%d counted given back; log:\n%s", x.rt.EventsGivenBack(), x.log.String())
	}

	f, hosts, qa2, qb2, _ := exchangeWorld(t, 42, l2opts{}, true)
	y := qa2.x
	if !y.rt.AsyncEvent(y.id, verbs.EventQPFatal, qa2.qp.QPN(), 0) {
		t.Fatal("QP_FATAL of a failed-over QP not kept")
	}
	qa2.total, qb2.total = qa2.total+20, qb2.total+20
	drive(t, f, hosts, 5*time.Microsecond, finished(qa2, qb2))
	if g := y.hp.Given(); len(g) != 0 || y.rt.EventsGivenBack() != 0 {
		t.Fatalf("a failover that came through gave %+v back", g)
	}
}
