package dbusapi

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/ibpath/ibpath/internal/api"
)

// object is what is exported as Interface on Path. Every exported method
// of it whose last result is *dbus.Error is a D-Bus method, so it has no
// others.
type object struct {
	s *Server
}

// Status returns status.Node as JSON.
func (o object) Status() (string, *dbus.Error) {
	b, err := json.Marshal(o.s.backend.Status())
	if err != nil {
		return "", newError(ErrInternal, fmt.Sprintf("json.Marshal status: %v", err))
	}
	return string(b), nil
}

// Arm re-arms the target's QPs and returns the api.ActionResult as JSON.
func (o object) Arm(sender dbus.Sender, device string, qpn uint32, port uint8, all bool) (string, *dbus.Error) {
	req := api.ActionRequest{Target: api.Target{Device: device, QPN: qpn, Port: port, All: all}}
	return o.s.act("arm", sender, req, o.s.backend.Arm)
}

// Migrate migrates the target's QPs to their alternate path (or, with
// dryRun, reports what would move) and returns the api.ActionResult as
// JSON.
func (o object) Migrate(sender dbus.Sender, device string, qpn uint32, port uint8, all, dryRun bool) (string, *dbus.Error) {
	req := api.ActionRequest{Target: api.Target{Device: device, QPN: qpn, Port: port, All: all}, DryRun: dryRun}
	return o.s.act("migrate", sender, req, o.s.backend.Migrate)
}

type actionFunc func(context.Context, api.Caller, api.ActionRequest) (api.ActionResult, error)

// act validates req, identifies the sender and hands both to the backend.
func (s *Server) act(action string, sender dbus.Sender, req api.ActionRequest, do actionFunc) (string, *dbus.Error) {
	if err := req.Target.Validate(); err != nil {
		return "", newError(ErrBadRequest, err.Error())
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.CallTimeout)
	defer cancel()
	caller, err := callerOf(ctx, s.conn, sender)
	if err != nil {
		s.log.Warn("dbus: cannot identify caller", "action", action, "sender", string(sender), "err", err)
		return "", newError(ErrForbidden, "cannot identify the caller: "+err.Error())
	}
	log := s.log.With("action", action, "target", req.Target.String(), "dry_run", req.DryRun,
		"uid", caller.UID, "pid", caller.PID, "sender", string(sender))
	res, err := do(ctx, caller, req)
	if err != nil {
		derr := toDBusError(err)
		log.Info("dbus: action refused", "error", derr.Name, "err", err)
		return "", derr
	}
	b, err := json.Marshal(res)
	if err != nil {
		return "", newError(ErrInternal, fmt.Sprintf("json.Marshal result: %v", err))
	}
	log.Info("dbus: action done", "qps", len(res.Results), "failed", res.Failed())
	return string(b), nil
}
