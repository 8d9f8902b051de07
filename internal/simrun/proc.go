package simrun

import (
	"errors"
	"fmt"
	"time"

	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// Proc is one application process: on one host, using one device (its
// QP's), under the shim's runtime.
type Proc struct {
	w      *World
	Name   string // "node0 A": its host and connection
	Host   *sim.Host
	Device string
	Shim   shim.Config // the shim's configuration, from the environment
	RT     *shim.Runtime
	HP     *shimtest.Hotpath // the data path
	QP     *QP

	sess   *session
	id     uintptr // the application context's id in the runtime
	ctx    verbs.Context
	pd     verbs.PD
	mr     verbs.MR
	buf    []byte
	due    time.Duration // when the runtime asked to be stepped again
	hasDue bool
	// stopped is when the process runs again after Stall: until then
	// nothing of it runs, neither the application nor the runtime.
	stopped time.Duration
	// ctxs are the device contexts the process opened (the application's
	// and the runtime's own), which Kill tears down; killed says it was.
	ctxs   []*sim.Context
	killed bool
}

// procDevices is the process's view of its host's devices (the
// runtime's verbs.Provider): the contexts it opens are the process's.
type procDevices struct{ p *Proc }

func (d procDevices) Devices() ([]verbs.DeviceInfo, error) { return d.p.Host.Devices() }

func (d procDevices) Open(name string) (verbs.Context, error) { return d.p.open(name) }

// open opens a device context of the process.
func (p *Proc) open(name string) (verbs.Context, error) {
	c, err := p.Host.Open(name)
	if err != nil {
		return nil, err
	}
	if sc, ok := c.(*sim.Context); ok {
		p.ctxs = append(p.ctxs, sc)
	}
	return c, nil
}

// running reports whether the process runs at virtual time now.
func (p *Proc) running(now time.Duration) bool { return now >= p.stopped }

// read is the process's memory as the shim's MemReader sees it.
func (p *Proc) read(addr uint64, n uint32) []byte {
	if p.mr == nil || addr < p.mr.Addr() || addr-p.mr.Addr()+uint64(n) > uint64(len(p.buf)) {
		return nil
	}
	o := addr - p.mr.Addr()
	return p.buf[o : o+uint64(n)]
}

// step runs the runtime's background work due now.
func (p *Proc) step() {
	if now := p.w.Fabric.Now(); !p.running(now) {
		p.due, p.hasDue = p.stopped, true // what was due runs when it runs again
		return
	}
	p.due, p.hasDue = p.RT.Step()
}

// readEvents reads the application's async events as a program does: the
// interposed ibv_get_async_event shows each to the runtime, which may
// keep it from the application.
func (p *Proc) readEvents() error {
	for {
		ev, err := p.ctx.GetAsyncEvent()
		if errors.Is(err, verbs.EAGAIN) {
			return nil
		}
		if err != nil {
			if !p.Host.HCA(p.Device).Alive() {
				return nil // a dead device's context: the application reads nothing more
			}
			return fmt.Errorf("simrun: %s: ibv_get_async_event: %w", p.Name, err)
		}
		var qpn uint32
		if ev.QP != nil {
			qpn = ev.QP.QPN()
		}
		kept := p.RT.AsyncEvent(p.id, ev.Type, qpn, ev.Port)
		p.w.record(Record{Kind: KindAppEvent, Proc: p, Event: ev, Kept: kept})
		p.ctx.AckAsyncEvent(ev)
	}
}
