package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/api"
)

func TestPolicyMatrix(t *testing.T) {
	p, err := ParseOperators([]string{"1001", "@2000"})
	if err != nil {
		t.Fatal(err)
	}
	p.groups = func(uid uint32) ([]uint32, error) {
		if uid == 1003 {
			return []uint32{100, 2000}, nil // operator through a supplementary group
		}
		return []uint32{100}, nil
	}
	root := api.Caller{UID: 0}
	operator := api.Caller{UID: 1001, GID: 100}
	groupOp := api.Caller{UID: 1002, GID: 2000}
	suppOp := api.Caller{UID: 1003, GID: 100}
	owner := api.Caller{UID: 1500, GID: 100}
	other := api.Caller{UID: 1600, GID: 100}
	qp := api.Target{Device: "mlx5_0", QPN: 0x10}
	port := api.Target{Device: "mlx5_0", Port: 1}
	all := api.Target{All: true}
	const qpOwner = 1500
	for _, tc := range []struct {
		name   string
		c      api.Caller
		t      api.Target
		allow  bool
		reason string
	}{
		{"root QP", root, qp, true, ""},
		{"root port", root, port, true, ""},
		{"root all", root, all, true, ""},
		{"operator uid QP", operator, qp, true, ""},
		{"operator uid all", operator, all, true, ""},
		{"operator group", groupOp, port, true, ""},
		{"operator supplementary group", suppOp, all, true, ""},
		{"owner own QP", owner, qp, true, ""},
		{"owner port", owner, port, false, "only root and operators"},
		{"owner all", owner, all, false, "only root and operators"},
		{"other user QP", other, qp, false, "belongs to uid 1500"},
		{"other user port", other, port, false, "only root and operators"},
	} {
		err := p.checkAction(tc.c, "migrate", tc.t, qpOwner)
		if tc.allow != (err == nil) {
			t.Errorf("%s: %v, want allowed=%v", tc.name, err, tc.allow)
			continue
		}
		var e *api.Error
		if err != nil && (!errors.As(err, &e) || e.Code != api.CodeForbidden || !strings.Contains(e.Message, tc.reason)) {
			t.Errorf("%s: %v, want forbidden naming %q", tc.name, err, tc.reason)
		}
	}
	if _, err := ParseOperators([]string{"no-such-user-ibpath"}); err == nil {
		t.Error("an unknown operator name was accepted")
	}
	if _, err := ParseOperators([]string{"@no-such-group-ibpath"}); err == nil {
		t.Error("an unknown operator group was accepted")
	}
	if p, err := ParseOperators([]string{"root", "@root"}); err != nil || !p.OperatorUIDs[0] || !p.OperatorGIDs[0] {
		t.Errorf("names: %+v %v", p, err)
	}
}
