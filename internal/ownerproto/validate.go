package ownerproto

import (
	"fmt"
	"math"
)

// payloads counts the payload fields that are set.
func (m Msg) payloads() int {
	n := 0
	for _, set := range []bool{m.Hello != nil, m.Welcome != nil, m.Error != "", m.QP != nil, m.QPGone != nil,
		m.Event != nil, m.PublishQP != nil, m.PublishMR != nil, m.Ack != nil, m.Command != nil, m.Result != nil, m.Lookup != nil, m.Found != nil} {
		if set {
			n++
		}
	}
	return n
}

// Validate checks that the message has exactly the payload its type needs
// and that the payload makes sense.
func (m Msg) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadMessage, m.Type, fmt.Sprintf(format, a...))
	}
	var ok bool
	switch m.Type {
	case TypeHello:
		ok = m.Hello != nil
		if ok && m.Hello.PID <= 0 {
			return bad("pid %d", m.Hello.PID)
		}
	case TypeWelcome:
		ok = m.Welcome != nil
	case TypeError:
		ok = m.Error != ""
	case TypeQP:
		ok = m.QP != nil
		if ok && (m.QP.Device == "" || m.QP.QPN == 0) {
			return bad("a device and a QPN are required")
		}
	case TypeQPGone:
		ok = m.QPGone != nil
		if ok && (m.QPGone.Device == "" || m.QPGone.QPN == 0) {
			return bad("a device and a QPN are required")
		}
	case TypeEvent:
		ok = m.Event != nil
		if ok && m.Event.Kind == "" {
			return bad("an event kind is required")
		}
	case TypePublishQP:
		ok = m.PublishQP != nil
		if ok && (m.PublishQP.Key.QPN == 0 || m.PublishQP.Backup.QPN == 0 || m.PublishQP.Backup.Device == "") {
			return bad("the default QPN, backup device and backup QPN are required")
		}
	case TypePublishMR:
		ok = m.PublishMR != nil
	case TypeAck:
		ok = m.Ack != nil
	case TypeLookupQP:
		ok = m.Lookup.only(m.Lookup != nil && m.Lookup.QP != nil)
	case TypeLookupMR:
		ok = m.Lookup.only(m.Lookup != nil && m.Lookup.MR != nil)
	case TypeLookupHCA:
		ok = m.Lookup.only(m.Lookup != nil && m.Lookup.HCA != nil)
		if ok && m.Lookup.HCA.GID.IsZero() && m.Lookup.HCA.LID == 0 {
			return bad("the route needs a GID or a LID")
		}
	case TypeLookupMRs:
		ok = m.Lookup.only(m.Lookup != nil && m.Lookup.MRs != nil)
		if ok {
			if err := m.Lookup.MRs.validate(); err != nil {
				return bad("%v", err)
			}
		}
	case TypeFound:
		ok = m.Found != nil
		if !ok {
			break
		}
		n := 0
		for _, set := range []bool{m.Found.QP != nil, m.Found.MR != nil, m.Found.HCA != nil, m.Found.MRs != nil} {
			if set {
				n++
			}
		}
		if n > 1 || (n == 0) == (m.Found.Error == "") {
			return bad("exactly one of qp, mr, hca and mrs, or an error")
		}
		if p := m.Found.MRs; p != nil && len(p.MRs) > MaxPageMRs {
			return bad("%d MR entries, at most %d", len(p.MRs), MaxPageMRs)
		}
		if m.Found.HCA != nil {
			if err := m.Found.HCA.validate(); err != nil {
				return bad("%v", err)
			}
		}
	case TypeCommand:
		ok = m.Command != nil
		if ok {
			if err := m.Command.validate(); err != nil {
				return bad("%v", err)
			}
		}
	case TypeResult:
		ok = m.Result != nil
	default:
		return fmt.Errorf("%w: unknown type %q", ErrBadMessage, m.Type)
	}
	if !ok {
		return bad("its payload is missing")
	}
	if n := m.payloads(); n != 1 {
		return bad("%d payloads, want 1", n)
	}
	needID := m.Type == TypePublishQP || m.Type == TypePublishMR || m.Type == TypeAck ||
		m.Type == TypeLookupQP || m.Type == TypeLookupMR || m.Type == TypeLookupHCA || m.Type == TypeFound ||
		m.Type == TypeCommand || m.Type == TypeResult
	if needID && m.ID == 0 {
		return bad("an id is required")
	}
	return nil
}

func (c *Command) validate() error {
	switch c.Op {
	case OpArm, OpMigrate:
		if c.Device == "" || c.QPN == 0 || c.Port != 0 || c.View != nil {
			return fmt.Errorf("%s: a device and a QPN are required, and no port or view", c.Op)
		}
	case OpDrain, OpUndrain:
		if c.Device == "" || c.Port == 0 || c.QPN != 0 || c.DryRun || c.View != nil {
			return fmt.Errorf("%s: a device and a port are required, and no QPN, dry run or view", c.Op)
		}
	case OpPortView:
		if c.Device == "" || c.Port == 0 || c.QPN != 0 || c.DryRun || c.View == nil {
			return fmt.Errorf("%s: a device, a port and a view are required, and no QPN or dry run", c.Op)
		}
		if v := c.View.Congestion; v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s: congestion %v is not a rate", c.Op, v)
		}
	default:
		return fmt.Errorf("unknown op %q", c.Op)
	}
	return nil
}

// only reports whether the lookup asks for exactly one thing, the one
// want says it asks for.
func (l *Lookup) only(want bool) bool {
	if !want {
		return false
	}
	n := 0
	for _, set := range []bool{l.QP != nil, l.MR != nil, l.HCA != nil, l.MRs != nil} {
		if set {
			n++
		}
	}
	return n == 1
}

func (q *MRQuery) validate() error {
	if len(q.Routes) == 0 || len(q.Routes) > MaxQueryRoutes {
		return fmt.Errorf("%d routes, want 1 to %d", len(q.Routes), MaxQueryRoutes)
	}
	for _, r := range q.Routes {
		if r.GID.IsZero() && r.LID == 0 {
			return fmt.Errorf("a route needs a GID or a LID")
		}
	}
	return nil
}
