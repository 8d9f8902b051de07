package demo

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/simrun"
	"github.com/ibpath/ibpath/internal/status"
)

// summary prints each QP side's end, the fabric's counters, the
// violations and the verdict line.
func summary(tl *timeline, w *simrun.World, rep Report) {
	tl.plain("")
	tl.plain("%-9s %7s %9s %6s  %-22s %-32s %4s %5s %5s  %s", "QP side", "sent", "received", "errors", "protected by", "path", "migr", "fail", "back", "longest pause")
	for _, o := range rep.Verdict.QPs {
		q, s := o.QP, o.Status
		if q.Proc.Killed() {
			tl.plain("%-9s %7d %9d %6s  %s", q.Conn+" "+q.Proc.Host.Name(), q.Sent, q.Recvd, "-", "process killed: not checked from then on")
			continue
		}
		tl.plain("%-9s %7d %9d %6d  %-22s %-32s %4d %5d %5d  %s", q.Conn+" "+q.Proc.Host.Name(), q.Sent, q.Recvd, q.Errors,
			layerName(s.Layer), where(s), s.Migrations, s.Failovers, s.Switchbacks, ms(q.MaxPause))
	}
	st := w.Fabric.Stats()
	tl.plain("fabric: %d events, %d requests (%d resent), %d packets lost, %d completions, %d path migrations, %d ACK timeouts",
		st.Events, st.Requests, st.Retransmits, st.Dropped, st.Completions, st.Migrations, st.RetryTimeouts)
	for _, v := range rep.Verdict.Violations {
		tl.plain("violation: %s", v)
	}
	tl.plain("%s", verdictLine(rep))
}

// where says where a QP's traffic runs: on its default QP (its primary
// path, and whether that is home), or on layer 2's backup.
func where(s status.QP) string {
	switch {
	case s.CrossNIC != "" && s.CrossNIC != fsm.SQDefault.String() && s.CrossNIC != fsm.SQSurfaced.String():
		return "backup " + s.Backup.String()
	case s.Primary == s.Home:
		return s.Primary.String() + " (home)"
	}
	return fmt.Sprintf("%s (home %s)", s.Primary, s.Home)
}

// verdictLine is the run's last line: PASS or FAIL, what was checked and
// what held, and where each QP's traffic ends.
func verdictLine(rep Report) string {
	v := rep.Verdict
	var conns []string
	for i := 0; i+1 < len(v.QPs); i += 2 {
		conns = append(conns, connEnd(v.QPs[i], v.QPs[i+1]))
	}
	checked := fmt.Sprintf("%d QPs (%d sides), %s signaled WRs completed once and in order, %s messages delivered once with their data, %d faults; %s",
		len(v.QPs)/2, len(v.QPs), thousands(v.WRs), thousands(v.Messages), rep.Faults, strings.Join(conns, ", "))
	if v.OK() {
		return "verdict: PASS — " + checked
	}
	return fmt.Sprintf("verdict: FAIL — %d violations (the first: %s); checked %s", len(v.Violations), v.Violations[0], checked)
}

// connEnd says where a connection ends: home, on the backup, or with its
// error surfaced.
func connEnd(a, b simrun.Outcome) string {
	conn := a.QP.Conn
	switch {
	case a.QP.Proc.Killed() || b.QP.Proc.Killed():
		k := a.QP
		if !k.Proc.Killed() {
			k = b.QP
		}
		end := "its peer's error surfaced"
		if a.Surfaced == "" && b.Surfaced == "" {
			end = "its peer saw no error"
		}
		return fmt.Sprintf("QP %s lost its process on %s (%s)", conn, k.Proc.Host.Name(), end)
	case a.Surfaced != "" || b.Surfaced != "":
		why := a.QP.MaySurface()
		if why == "" {
			why = b.QP.MaySurface()
		}
		if why == "" {
			return fmt.Sprintf("QP %s surfaced its error", conn)
		}
		return fmt.Sprintf("QP %s surfaced its error (layer 3: %s)", conn, why)
	case onBackup(a.Status) || onBackup(b.Status):
		return fmt.Sprintf("QP %s on the backup (%s)", conn, cmp.Or(a.Status.Backup.Device, "?"))
	case a.Status.Primary == a.Status.Home && b.Status.Primary == b.Status.Home:
		return fmt.Sprintf("QP %s home", conn)
	}
	return fmt.Sprintf("QP %s on its alternate path (%s, %s)", conn, a.Status.Primary, b.Status.Primary)
}

func onBackup(s status.QP) bool {
	return s.CrossNIC != "" && s.CrossNIC != fsm.SQDefault.String() && s.CrossNIC != fsm.SQSurfaced.String()
}

// thousands writes n with a comma every three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
