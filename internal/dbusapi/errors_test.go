package dbusapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ibpath/ibpath/internal/api"
)

func TestToDBusError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		name string
		msg  string
	}{
		{&api.Error{Code: api.CodeForbidden, Message: "uid 1000 does not own QP 0x11"}, ErrForbidden, "uid 1000 does not own QP 0x11"},
		{fmt.Errorf("relay: %w", &api.Error{Code: api.CodeOwnerGone, Message: "pid 42 exited"}), ErrOwnerGone, "pid 42 exited"},
		{&api.Error{Code: "new-code", Message: "m"}, ErrInternal, "m"},
		{fmt.Errorf("relay: %w", context.DeadlineExceeded), ErrOwnerTimeout, "relay: context deadline exceeded"},
		{errors.New("boom"), ErrInternal, "boom"},
	} {
		got := toDBusError(tc.err)
		if got.Name != tc.name || len(got.Body) != 1 || got.Body[0] != tc.msg {
			t.Errorf("toDBusError(%v) = %s %v, want %s [%s]", tc.err, got.Name, got.Body, tc.name, tc.msg)
		}
	}
}

func TestParseProcStatus(t *testing.T) {
	const text = "Name:\tmpirun\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t42\n" +
		"Uid:\t1000\t1001\t1001\t1001\nGid:\t100\t200\t200\t200\nGroups:\t27 100\n"
	if gid, ok := parseProcStatus([]byte(text), 1001); !ok || gid != 200 {
		t.Errorf("effective uid 1001: gid %d %v, want 200 true", gid, ok)
	}
	if _, ok := parseProcStatus([]byte(text), 1000); ok {
		t.Error("a process whose effective uid is not the caller's gave a gid")
	}
	if _, ok := parseProcStatus([]byte("Name:\tx\nUid:\t0\t0\t0\t0\n"), 0); ok {
		t.Error("a status without a Gid line gave a gid")
	}
	if _, ok := parseProcStatus([]byte("Uid:\t0\nGid:\t0\n"), 0); ok {
		t.Error("a status with one field per line gave a gid")
	}
}
