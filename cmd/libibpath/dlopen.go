package main

/*
#include "shim.h"
*/
import "C"

import (
	"log/slog"
	"runtime"

	"github.com/ibpath/ibpath/internal/shim"
)

// dlopenNote says at the first verb what became of the program's own
// dlopen of libibverbs (the front's hook, front/dlopen.c): NCCL before
// 2.30 opens it before its first verb, so the counts are in by then.
func dlopenNote(log *slog.Logger, cfg shim.Config) {
	if cfg.Disabled || !cfg.Dlopen {
		return
	}
	var redirected, foreign C.long
	switch C.lip_front_dlopen(&redirected, &foreign) {
	case -1:
		log.Info("libibpath: the shim's core was loaded without its front (libibpath.so): dlopen is not interposed, and a program that opens libibverbs itself runs unprotected", "arch", runtime.GOARCH)
		return
	case 0:
		log.Info("libibpath: dlopen is not interposed on this machine: a program that opens libibverbs itself runs unprotected", "arch", runtime.GOARCH)
		return
	}
	if n := redirected; n > 0 {
		log.Info("libibpath: the program opened libibverbs itself (dlopen): it got the shim's handle, its verbs come through the shim", "times", int64(n))
	}
	if n := foreign; n > 0 {
		log.Warn("libibpath: the program opened a libibverbs other than the shim's: its verbs are not protected", "times", int64(n))
	}
}
