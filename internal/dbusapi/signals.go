package dbusapi

import (
	"time"

	"github.com/ibpath/ibpath/internal/status"
)

// signalArgs returns the body of the signal an event becomes, or false
// for an event kind that is no signal.
func signalArgs(ev status.Event) ([]any, bool) {
	switch ev.Kind {
	case status.EvPathMigrated, status.EvFailover, status.EvSwitchback:
		return []any{ev.Device, ev.QPN, ev.From, ev.To, ev.Reason}, true
	case status.EvPortStateChanged:
		return []any{ev.Device, ev.Port, ev.From, ev.To}, true
	}
	return nil, false
}

// loop turns the backend's events into signals and keeps the properties
// fresh: after every event and on every tick. It returns when the server
// closes, the subscription ends, or the bus connection is lost.
func (s *Server) loop(events <-chan status.Event) {
	defer close(s.done)
	tick := time.NewTicker(s.opts.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.conn.Context().Done():
			s.log.Error("dbus: bus connection lost", "bus", s.opts.Bus)
			return
		case ev, ok := <-events:
			if !ok {
				s.log.Warn("dbus: event subscription ended")
				return
			}
			s.emit(ev)
			s.refresh()
		case <-tick.C:
			s.refresh()
		}
	}
}

// emit sends the signal of one event.
func (s *Server) emit(ev status.Event) {
	args, ok := signalArgs(ev)
	if !ok {
		s.log.Debug("dbus: event without a signal", "kind", ev.Kind)
		return
	}
	if err := s.conn.Emit(Path, Interface+"."+ev.Kind, args...); err != nil {
		s.log.Warn("dbus: cannot emit signal", "signal", ev.Kind, "err", err)
	}
}
