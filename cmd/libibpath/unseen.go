package main

/*
#include <stdatomic.h>
extern atomic_long lip_ctxs_open;
static long lip_ctxs_count(void) { return atomic_load(&lip_ctxs_open); }
*/
import "C"

import (
	"log/slog"
	"os"
	"time"

	"github.com/ibpath/ibpath/internal/shim"
)

// The watch for device contexts opened behind the shim's back
// (shim.Unseen) starts when the library is loaded: a program whose verbs
// never come through the shim never calls ibpathInit. It stays quiet
// when the shim is disabled or its log is above Warn.
func init() {
	cfg, err := shim.FromEnv(nil)
	if err != nil || cfg.Disabled || cfg.Log > slog.LevelWarn {
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.Log}))
	go shim.Unseen{
		FDDir:  "/proc/self/fd",
		Prefix: shim.UverbsPrefix,
		Seen:   func() int { return int(C.lip_ctxs_count()) },
		At:     shim.UnseenChecks,
		Warn:   func(msg string) { log.Warn(msg) },
		Sleep:  time.Sleep,
	}.Run()
}
