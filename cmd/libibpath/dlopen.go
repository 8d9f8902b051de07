package main

/*
#include <stdatomic.h>
extern atomic_long lip_dlopen_redirected;
extern atomic_long lip_dlopen_foreign;
extern int lip_dlopen_hooked;
static long lip_dlopen_count(int foreign) { return foreign ? atomic_load(&lip_dlopen_foreign) : atomic_load(&lip_dlopen_redirected); }
*/
import "C"

import (
	"log/slog"
	"runtime"

	"github.com/ibpath/ibpath/internal/shim"
)

// dlopenNote says at the first verb what became of the program's own
// dlopen of libibverbs (dlopen.c): NCCL before 2.30 opens it before its
// first verb, so the counts are in by then.
func dlopenNote(log *slog.Logger, cfg shim.Config) {
	if cfg.Disabled || !cfg.Dlopen {
		return
	}
	if C.lip_dlopen_hooked == 0 {
		log.Info("libibpath: dlopen is not interposed on this machine: a program that opens libibverbs itself runs unprotected", "arch", runtime.GOARCH)
		return
	}
	if n := C.lip_dlopen_count(0); n > 0 {
		log.Info("libibpath: the program opened libibverbs itself (dlopen): it got the shim's handle, its verbs come through the shim", "times", int64(n))
	}
	if n := C.lip_dlopen_count(1); n > 0 {
		log.Warn("libibpath: the program opened a libibverbs other than the shim's: its verbs are not protected", "times", int64(n))
	}
}
