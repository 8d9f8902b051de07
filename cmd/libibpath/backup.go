package main

import (
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/ibv"
)

// provider opens devices for the shim's own use (port events, backup
// resources). Its contexts register the application's own memory, which
// is C memory: their PDs register it by address (ibv.PD.RegMRAddr)
// rather than through ibv's Go-heap guard.
type provider struct{ ibv.Provider }

func (p provider) Open(name string) (verbs.Context, error) {
	c, err := ibv.OpenDevice(name)
	if err != nil {
		return nil, err
	}
	return appMemContext{c}, nil
}

type appMemContext struct{ *ibv.Context }

func (c appMemContext) AllocPD() (verbs.PD, error) {
	pd, err := c.Context.AllocPD()
	if err != nil {
		return nil, err
	}
	return appMemPD{pd.(*ibv.PD)}, nil
}

type appMemPD struct{ *ibv.PD }

// RegMR registers buf, which lies in the application's C memory.
func (pd appMemPD) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "empty buffer")
	}
	return pd.PD.RegMRAddr(uintptr(unsafe.Pointer(&buf[0])), len(buf), access)
}

// appMR is a memory region the application registered, as verbs sees it.
type appMR struct {
	pd         verbs.PD
	addr       uint64
	length     int
	lkey, rkey uint32
	access     verbs.AccessFlags
}

func (m appMR) PD() verbs.PD              { return m.pd }
func (m appMR) Addr() uint64              { return m.addr }
func (m appMR) Len() int                  { return m.length }
func (m appMR) LKey() uint32              { return m.lkey }
func (m appMR) RKey() uint32              { return m.rkey }
func (m appMR) Access() verbs.AccessFlags { return m.access }
func (m appMR) Dereg() error {
	return verbs.Errorf("ibv_dereg_mr", verbs.EINVAL, "the application's MR belongs to it")
}
