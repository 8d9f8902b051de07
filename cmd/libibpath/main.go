// Command libibpath is the core of the ibpath shim: libibpath-core.so,
// which the front libibpath.so (front/, C only) loads into unmodified RDMA
// programs that preload it with LD_PRELOAD (or name it in
// NCCL_IBVERBS_LIB), unless IBPATH_DISABLE=1. Build both with
//
//	cmd/libibpath/build.sh build/libibpath.so
//
// (a plain `go build -buildmode=c-shared ./cmd/libibpath` makes a core
// that also works preloaded alone, without the front's dlopen hook).
//
// It interposes the control verbs ibv_open_device, ibv_close_device,
// ibv_create_qp, ibv_modify_qp, ibv_destroy_qp, ibv_get_async_event and
// ibv_ack_async_event (asyncev.c: fatal events of what layer 2 carries are
// kept, and given back if its failover surfaces), the
// memory registrations and the completion channel verbs (symbol versions
// IBVERBS_1.1, 1.8 and 1.0, forwarded to libibverbs through lip_next,
// frontlink.c); channel.c
// hands the application channels the shim can signal for completions a
// backup device delivers) and librdmacm's rdma_get_cm_event (RDMACM_1.0;
// cm.c keeps the kernel's UNREACHABLE of a protected, connected QP from
// the application), and
// swaps each opened context's post_send, post_recv and poll_cq (inline in
// verbs.h) for C wrappers that record every work request of an RC QP in a
// shadow ring before calling the provider (a QP posting through the
// ibv_wr_* API gets the shim's wr_* functions instead, wrapi.c, which
// record its batches the same way); once a QP's failover onto its
// backup has settled, the express lane (express.c) posts and polls it on
// the backup in C. The Go side (internal/shim)
// tracks devices and QPs, decides what each layer does, and reports to
// ibpathd when it runs. See docs/SHIM.md.
package main

/*
#cgo LDFLAGS: -libverbs -ldl
#include "shim.h"

static void *lip_addr(uint64_t a) { return (void *)(uintptr_t)a; }
*/
import "C"

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/ibpath/ibpath/internal/shim"
)

var (
	rt       *shim.Runtime
	attacher *shim.Attacher
)

// ibpathInit runs once, at the first interposed verb.
//
//export ibpathInit
func ibpathInit() {
	defer func() {
		if p := recover(); p != nil {
			panicked("ibpathInit", p)
			C.lip_enabled = 0 // nothing set up: every verb passes straight through
		}
	}()
	inject("ibpathInit")
	cfg, err := shim.FromEnv(nil)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.Log}))
	if err != nil {
		fmt.Fprintf(os.Stderr, "libibpath: %v; the shim disables itself and every verb passes straight through\n", err)
		cfg.Disabled = true
	}
	if cfg.Log <= slog.LevelInfo || err != nil || cfg.Disabled {
		fmt.Fprintln(os.Stderr, cfg.Banner(os.Getpid()))
	}
	dlopenNote(log, cfg)
	// The shim's goroutines mostly wait: the Go runtime in the program
	// gets few threads to run them and its garbage collector (also when
	// the core disabled itself, on a bad setting or loaded without its
	// front: the runtime is there all the same; with IBPATH_DISABLE=1 the
	// front never loads the core).
	runtime.GOMAXPROCS(min(cfg.GoMaxProcs, runtime.NumCPU()))
	if cfg.Disabled {
		C.lip_enabled = 0
		return
	}
	if !cfg.Record {
		C.lip_record = 0
	}
	if cfg.SinglePoster {
		C.lip_single_poster = 1
	}
	if cfg.SinglePoller {
		C.lip_single_poller = 1
	}
	rt = shim.NewRuntime(cfg, log)
	rt.SetProvider(provider{})
	if cfg.Record {
		// Inline payloads posted to a diverted QP are copied from the
		// application's memory while its post is under way.
		rt.SetMemReader(func(addr uint64, n uint32) []byte {
			if addr == 0 || n == 0 {
				return nil
			}
			return C.GoBytes(C.lip_addr(C.uint64_t(addr)), C.int(n))
		})
		rt.SetHotpath(hotpath{})
		if cfg.Channels {
			C.lip_channels = 1
		}
		if cfg.SwitchBack {
			C.lip_cq_headroom = C.int(cfg.CQHeadroom)
		}
	}
	if cfg.Socket != "off" {
		attacher = shim.Attach(rt, cfg.Socket)
	}
}

func main() {}
