package crossnic_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// A backup device whose memory allocation or registration fails, for the
// staging area of replayed inline copies: its PD's AllocMem fails when
// failAlloc is set; its RegMR fails for memory from AllocMem when failReg
// is set (the application's memory, registered by the Shadow, goes
// through). Freed memory is recorded.
type stageCtx struct {
	verbs.Context
	st *stageFaults
}

type stageFaults struct {
	failAlloc, failReg bool
	allocated, freed   []*byte
}

type stagePD struct {
	verbs.PD
	st *stageFaults
}

type stageQP struct {
	verbs.QP
	pd *stagePD
}

func (c stageCtx) AllocPD() (verbs.PD, error) {
	pd, err := c.Context.AllocPD()
	if err != nil {
		return nil, err
	}
	return &stagePD{pd, c.st}, nil
}

func (p *stagePD) CreateQP(init verbs.QPInitAttr) (verbs.QP, error) {
	q, err := p.PD.CreateQP(init)
	if err != nil {
		return nil, err
	}
	return stageQP{q, p}, nil
}

func (q stageQP) PD() verbs.PD { return q.pd }

func (p *stagePD) AllocMem(n int) ([]byte, error) {
	if p.st.failAlloc {
		return nil, verbs.Errorf("mmap", verbs.ENOMEM, "injected")
	}
	b, err := p.PD.(verbs.MemAllocator).AllocMem(n)
	if err == nil {
		p.st.allocated = append(p.st.allocated, &b[0])
	}
	return b, err
}

func (p *stagePD) FreeMem(b []byte) error {
	p.st.freed = append(p.st.freed, &b[0])
	return p.PD.(verbs.MemAllocator).FreeMem(b)
}

func (p *stagePD) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MR, error) {
	for _, a := range p.st.allocated {
		if p.st.failReg && a == &buf[0] {
			return nil, verbs.Errorf("ibv_reg_mr", verbs.ENOMEM, "injected")
		}
	}
	return p.PD.RegMR(buf, access)
}

// TestAdoptInlineStagingFails: A fails over with an inline SEND in
// flight; the staging area its replay needs cannot be allocated, or
// allocated but not registered (then it is freed). The replay cannot send
// the WR, so the error surfaces, saying why, and A's application gets
// every outstanding WR back as a flush, none twice; nothing is
// registered from the Go heap on the way (the fabric is strict).
func TestAdoptInlineStagingFails(t *testing.T) {
	for _, c := range []struct {
		name   string
		faults stageFaults
		reason string
	}{
		{"alloc", stageFaults{failAlloc: true}, "the inline copies' staging area: allocate"},
		{"register", stageFaults{failReg: true}, "the inline copies' staging area: register"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.faults
			f, a, b, _ := adoptPairWrap(t, sim.Config{Seed: 25, StrictMem: true},
				func(x verbs.Context) verbs.Context { return stageCtx{x, &st} })
			must(t, f.SetLink(a.ctx.(*sim.Context).HCA().Port(1), false))
			a.postDirect(t, a.round(b, 0, false))
			a.postDirect(t, a.round(b, 1, true))
			var err error
			a.conn, err = a.shadow.Adopt(a.qp, a.cq, a.direct.resume())
			must(t, err)
			a.conn.HandleEvent(a.ctx, verbs.AsyncEvent{Type: verbs.EventPortErr, Port: 1}, 1)
			var got []verbs.WC
			for i := 0; i < 300; i++ {
				f.RunFor(10 * time.Microsecond)
				if b.conn == nil {
					if cq, err := b.ch.GetCQEvent(); err == nil {
						b.ch.AckCQEvents(cq, 1)
						b.conn, err = b.shadow.Adopt(b.qp, b.cq, b.direct.resume())
						must(t, err)
					}
				} else {
					b.pollConn(t)
				}
				got = append(got, a.pollConn(t)...)
				if sq, _ := a.conn.State(); sq == fsm.SQSurfaced && len(got) >= 3 {
					break
				}
			}
			if sq, _ := a.conn.State(); sq != fsm.SQSurfaced {
				t.Fatalf("A's send queue %v, want surfaced (reason %q)", sq, a.conn.Reason())
			}
			if !strings.Contains(a.conn.Reason(), c.reason) {
				t.Fatalf("reason %q, want it to say %q", a.conn.Reason(), c.reason)
			}
			seen := map[uint64]bool{}
			for _, wc := range got {
				if seen[wc.WRID] || wc.Status == verbs.WCSuccess && wc.WRID == 3 {
					t.Fatalf("completion %+v twice, or the unsent inline SEND succeeded (all: %v)", wc, got)
				}
				seen[wc.WRID] = true
			}
			if !seen[3] {
				t.Fatalf("the inline SEND (wr_id 3) never came back: %v", got)
			}
			if c.faults.failReg && (len(st.allocated) != 1 || len(st.freed) != 1 || st.freed[0] != st.allocated[0]) {
				t.Fatalf("staging memory allocated %d, freed %d: the refused area must be freed", len(st.allocated), len(st.freed))
			}
			must(t, a.conn.Close())
		})
	}
}
