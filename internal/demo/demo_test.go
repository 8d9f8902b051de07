package demo

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

func runDemo(t *testing.T, seed uint64) (Result, string) {
	t.Helper()
	var buf bytes.Buffer
	res, err := run(&buf, Options{Seed: seed})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, buf.String())
	}
	return res, buf.String()
}

func mustEndpoint(t *testing.T, r Result, qp, host string) EndpointResult {
	t.Helper()
	e, ok := r.Endpoint(qp, host)
	if !ok {
		t.Fatalf("no result for QP %s on %s", qp, host)
	}
	return e
}

func TestScenario(t *testing.T) {
	res, out := runDemo(t, 7)

	// QP A: the cable pull is hidden by APM.
	for _, host := range []string{"node0", "node1"} {
		if !res.HasEvent(host, verbs.EventPathMig, "A") {
			t.Errorf("QP A on %s: no PATH_MIG event; events: %v", host, res.Events[host])
		}
		if res.HasEvent(host, verbs.EventPathMigErr, "") {
			t.Errorf("%s: unexpected PATH_MIG_ERR", host)
		}
		a := mustEndpoint(t, res, "A", host)
		if a.SendErr != 0 || a.RecvErr != 0 || len(a.Errors) != 0 {
			t.Errorf("QP A on %s: error completions %d send / %d recv (%v), want none", host, a.SendErr, a.RecvErr, a.Errors)
		}
		if a.DataErrors != 0 {
			t.Errorf("QP A on %s: %d data errors", host, a.DataErrors)
		}
		if a.Port != 2 || a.State != verbs.QPSRTS || a.Mig != verbs.MigMigrated {
			t.Errorf("QP A on %s ended %v/%v on port %d, want RTS/MIGRATED on port 2", host, a.State, a.Mig, a.Port)
		}
		if a.Verified == 0 || a.Verified != a.RecvOK {
			t.Errorf("QP A on %s: %d of %d notifications verified", host, a.Verified, a.RecvOK)
		}
		// Drained at the end: every posted signaled WR completed exactly once.
		if a.Posted != a.SendOK {
			t.Errorf("QP A on %s: %d posted, %d completed", host, a.Posted, a.SendOK)
		}
	}
	if !res.HasEvent("node0", verbs.EventPortErr, "") {
		t.Errorf("node0: no PORT_ERR")
	}

	// QP B: no alternate, the HCA death surfaces as errors.
	b0, b1 := mustEndpoint(t, res, "B", "node0"), mustEndpoint(t, res, "B", "node1")
	if !res.HasEvent("node0", verbs.EventDeviceFatal, "") {
		t.Errorf("node0: no DEVICE_FATAL; events: %v", res.Events["node0"])
	}
	if res.HasEvent("node1", verbs.EventDeviceFatal, "") {
		t.Errorf("node1: unexpected DEVICE_FATAL")
	}
	if !slices.Equal(b0.Errors, []verbs.WCStatus{verbs.WCWRFlushErr}) || b0.SendErr == 0 || b0.RecvErr == 0 {
		t.Errorf("QP B on node0: errors %v (%d send, %d recv), want only WR_FLUSH_ERR on both queues", b0.Errors, b0.SendErr, b0.RecvErr)
	}
	if !slices.Equal(b1.Errors, []verbs.WCStatus{verbs.WCRetryExcErr, verbs.WCWRFlushErr}) {
		t.Errorf("QP B on node1: errors %v, want RETRY_EXC_ERR then WR_FLUSH_ERR", b1.Errors)
	}
	if b0.State != verbs.QPSErr || b1.State != verbs.QPSErr || !b0.DeviceDead {
		t.Errorf("QP B ended %v (device dead %v) / %v, want ERR on both", b0.State, b0.DeviceDead, b1.State)
	}
	for _, b := range []EndpointResult{b0, b1} {
		if b.DataErrors != 0 {
			t.Errorf("QP B on %s: %d data errors", b.Host, b.DataErrors)
		}
		if b.Posted != b.SendOK+b.SendErr {
			t.Errorf("QP B on %s: %d posted, %d ok + %d err", b.Host, b.Posted, b.SendOK, b.SendErr)
		}
	}
	if res.Stats.Migrations == 0 || res.Stats.RetryTimeouts == 0 {
		t.Errorf("stats %+v: want migrations and retry timeouts", res.Stats)
	}

	for _, s := range []string{"PORT_ERR", "PATH_MIG", "DEVICE_FATAL", "RETRY_EXC_ERR", "WR_FLUSH_ERR"} {
		if !strings.Contains(out, s) {
			t.Errorf("output does not mention %s", s)
		}
	}
	if n := strings.Count(out, "\n"); n > 70 {
		t.Errorf("timeline has %d lines, want it short", n)
	}
}

func TestDeterministic(t *testing.T) {
	_, a := runDemo(t, 42)
	_, b := runDemo(t, 42)
	if a != b {
		t.Fatalf("same seed, different output:\n%s\n---\n%s", a, b)
	}
}

func TestVerboseTraces(t *testing.T) {
	var quiet, loud bytes.Buffer
	if err := Run(&quiet, Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := Run(&loud, Options{Seed: 1, Verbose: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(loud.String(), " trace ") || strings.Contains(quiet.String(), " trace ") {
		t.Errorf("trace records: verbose %v, quiet %v", strings.Contains(loud.String(), " trace "), strings.Contains(quiet.String(), " trace "))
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteErrorReturned(t *testing.T) {
	if err := Run(failWriter{}, Options{Seed: 1}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Run to a failing writer: %v", err)
	}
}
