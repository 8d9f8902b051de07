package demo

import (
	"fmt"
	"io"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// printer writes timeline lines and keeps the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) plain(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}

// at prints one timeline line: virtual time in ms, then what happened.
func (p *printer) at(t time.Duration, format string, args ...any) {
	p.plain("%10.3f ms  %s", float64(t)/float64(time.Millisecond), fmt.Sprintf(format, args...))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

// statusNames are the IBV_WC_* names of the statuses a demo may meet.
var statusNames = map[verbs.WCStatus]string{
	verbs.WCSuccess: "SUCCESS", verbs.WCLocLenErr: "LOC_LEN_ERR", verbs.WCLocQPOpErr: "LOC_QP_OP_ERR",
	verbs.WCLocProtErr: "LOC_PROT_ERR", verbs.WCWRFlushErr: "WR_FLUSH_ERR",
	verbs.WCRemInvReqErr: "REM_INV_REQ_ERR", verbs.WCRemAccessErr: "REM_ACCESS_ERR",
	verbs.WCRemOpErr: "REM_OP_ERR", verbs.WCRetryExcErr: "RETRY_EXC_ERR",
	verbs.WCRNRRetryExcErr: "RNR_RETRY_EXC_ERR", verbs.WCFatalErr: "FATAL_ERR",
}

func statusName(st verbs.WCStatus) string {
	if n, ok := statusNames[st]; ok {
		return n
	}
	return fmt.Sprintf("status %d", uint8(st))
}

// errRun is a run of error completions of one endpoint, queue and status.
type errRun struct {
	e           *endpoint
	recv        bool
	st          verbs.WCStatus
	first, last uint64
	n           int
}

type errRuns []errRun

func (rs *errRuns) add(e *endpoint, recv bool, wc verbs.WC) {
	id := wc.WRID
	if k := len(*rs) - 1; k >= 0 {
		r := &(*rs)[k]
		if r.e == e && r.recv == recv && r.st == wc.Status {
			r.last, r.n = id, r.n+1
			return
		}
	}
	*rs = append(*rs, errRun{e: e, recv: recv, st: wc.Status, first: id, last: id, n: 1})
}

func (s *scenario) printErrRuns(rs errRuns) {
	for _, r := range rs {
		what := fmt.Sprintf("%d send WRs (wr_id %d..%d, seq %d..%d)", r.n, r.first, r.last, r.first/2, r.last/2)
		if r.first/2 == r.last/2 {
			what = fmt.Sprintf("%d send WRs (wr_id %d..%d, seq %d)", r.n, r.first, r.last, r.first/2)
		}
		switch {
		case r.recv && r.n == 1:
			what = fmt.Sprintf("1 receive WR (wr_id %d)", r.first)
		case r.recv:
			what = fmt.Sprintf("%d receive WRs (wr_id %d..%d)", r.n, r.first, r.last)
		case r.n == 1:
			op := "RDMA_WRITE"
			if r.first%2 == 1 {
				op = "WRITE_WITH_IMM"
			}
			what = fmt.Sprintf("send WR %d (%s of seq %d)", r.first, op, r.first/2)
		}
		s.p.at(s.f.Now(), "%v: %s completed with %s (%v)", r.e, what, statusName(r.st), r.st)
	}
}

// window prints the traffic of each QP since the last window.
func (s *scenario) window(t time.Duration) {
	line := fmt.Sprintf("traffic %.1f-%.1f ms:", float64(s.win)/1e6, float64(t)/1e6)
	for i := 0; i < len(s.eps); i += 2 {
		a, b := s.eps[i], s.eps[i+1]
		state := ""
		switch {
		case a.t.failed || b.t.failed:
			state = " (QP in error)"
		case a.t.stalled || b.t.stalled:
			state = " (stalled)"
		case a.l2 != nil && a.l2.sq != fsm.SQDefault || b.l2 != nil && b.l2.sq != fsm.SQDefault:
			state = " (layer 2: on the backups)"
		case a.l2 != nil && b.l2 != nil && max(a.l2.homeAt, b.l2.homeAt) > s.win:
			state = fmt.Sprintf(" (layer 2: on the backups until %s, then home)", ms(max(a.l2.homeAt, b.l2.homeAt)))
		}
		line += fmt.Sprintf("  %s %5d WCs ok, %4d notifications verified%s", a.qpName,
			a.t.winOK+b.t.winOK, a.t.winVerified+b.t.winVerified, state)
		if i == 0 {
			line += ";"
		}
		a.t.winOK, a.t.winVerified, b.t.winOK, b.t.winVerified = 0, 0, 0, 0
	}
	s.p.at(t, "%s", line)
	s.win = t
}

// summary prints the final table and the fabric's counters.
func (s *scenario) summary() {
	p := s.p
	p.plain("")
	p.plain("%-2s %-13s %6s %6s %5s %6s %5s %8s %8s  %-5s %-8s %s", "QP", "endpoint", "posted", "ok",
		"err", "rcv ok", "rcv err", "verified", "data err", "state", "mig", "port")
	for _, r := range s.res.Endpoints {
		mig, port := r.Mig.String(), fmt.Sprint(r.Port)
		if !r.MigKnown {
			mig = "-"
		}
		if r.DeviceDead {
			port += " (device dead)"
		}
		if r.Protected && r.L2SQ != fsm.SQDefault {
			port += "; traffic on " + r.Backup
		}
		p.plain("%-2s %-13s %6d %6d %5d %6d %7d %8d %8d  %-5v %-8s %s", r.QP, r.Host+"/"+r.Device,
			r.Posted, r.SendOK, r.SendErr, r.RecvOK, r.RecvErr, r.Verified, r.DataErrors, r.State, mig, port)
	}
	s.l1Summary()
	s.l2Summary()
	st := s.res.Stats
	p.plain("fabric: %d events, %d requests (%d resent), %d packets dropped, %d completions, %d path migrations, %d ACK timeouts",
		st.Events, st.Requests, st.Retransmits, st.Dropped, st.Completions, st.Migrations, st.RetryTimeouts)
}
