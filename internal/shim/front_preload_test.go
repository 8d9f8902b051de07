package shim

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFrontExports: the front exports exactly the verbs of libibpath.map,
// each at its symbol version (front/verbs.h is their list), dlopen, and
// the functions that install signal handlers (front/signals.c).
func TestFrontExports(t *testing.T) {
	b := buildBed(t)
	mapText, err := os.ReadFile(filepath.Join("..", "..", "cmd", "libibpath", "libibpath.map"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	block := regexp.MustCompile(`(?s)([\w.]+) \{\s*global:(.*?)\}`)
	for _, m := range block.FindAllStringSubmatch(string(mapText), -1) {
		for _, name := range strings.Split(m[2], ";") {
			if name = strings.TrimSpace(name); name != "" {
				want = append(want, name+"@"+m[1])
			}
		}
	}
	if len(want) < 20 {
		t.Fatalf("libibpath.map: %d verbs read, want the 22 or so it lists", len(want))
	}
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		want = append(want, "dlopen@")
	}
	want = append(want, "sigaction@", "signal@", "sysv_signal@", "bsd_signal@", "sigset@")
	f, err := elf.Open(b.shim)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
			got = append(got, s.Name+"@"+s.Version)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the front exports\n%v\nwant\n%v", got, want)
	}
}

// procFacts: whether pid has path mapped, its thread count, and the
// signals it catches (SigCgt of /proc/pid/status).
func procFacts(t *testing.T, pid int, path string) (mapped bool, threads int, caught string) {
	t.Helper()
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			caught = strings.TrimSpace(v)
		}
	}
	return strings.Contains(string(maps), path), threads, caught
}

// TestPreloadDisabledLoadsNoCore: with IBPATH_DISABLE=1 the program holds
// its QP with the front alone: the core (and its Go runtime) is not
// mapped, the program has its one thread and catches the signals it
// catches without the shim; it sees what it sees without the shim, and
// the banner says the shim is disabled. With the shim on, the core is
// there, with its threads.
func TestPreloadDisabledLoadsNoCore(t *testing.T) {
	b := buildBed(t)
	held := func(env []string) (out, errs string, mapped bool, threads int, caught string) {
		t.Helper()
		out, errs = heldProbe(t, b, env, func(pid int) { mapped, threads, caught = procFacts(t, pid, b.core()) })
		return out, errs, mapped, threads, caught
	}
	plain, _, _, plainThreads, plainCaught := held(nil)
	out, errs, mapped, threads, caught := held([]string{"IBPATH_DISABLE=1"})
	if out != plain || !strings.Contains(errs, "disabled by IBPATH_DISABLE") {
		t.Errorf("IBPATH_DISABLE=1: stdout %q (without the shim %q), stderr %q", out, plain, errs)
	}
	if mapped || threads != plainThreads || caught != plainCaught {
		t.Errorf("IBPATH_DISABLE=1: core mapped %v, %d threads, signals caught %s; without the shim %d threads, %s",
			mapped, threads, caught, plainThreads, plainCaught)
	}
	out, errs, mapped, threads, caught = held([]string{"IBPATH_SOCKET=off"})
	if out != plain || !mapped || threads <= plainThreads || caught == plainCaught {
		t.Errorf("shim on: stdout %q, core mapped %v, %d threads, signals caught %s\n%s", out, mapped, threads, caught, errs)
	}
}

// TestPreloadCoreUnusable: a front whose core is missing, or of another
// build (it refuses the front's link), says so and passes every verb
// straight through: the program sees what it sees without the shim.
func TestPreloadCoreUnusable(t *testing.T) {
	b := buildBed(t)
	plain, _ := b.run(t, nil, "100")
	alone := filepath.Join(b.dir, "alone")
	other := filepath.Join(b.dir, "other")
	for _, d := range []string{alone, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := linkShim(b.shim, filepath.Join(d, "libibpath.so")); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(other, "core.c")
	if err := os.WriteFile(src, []byte("int lip_front_attach(const void *f, const int **e) { (void)f; (void)e; return -1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(other, "libibpath-core.so"), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, c := range []struct{ dir, says string }{
		{alone, "libibpath-core.so: cannot open shared object file"},
		{other, "is of another build than the front"},
	} {
		bed := b
		bed.shim = filepath.Join(c.dir, "libibpath.so")
		out, errs := bed.run(t, []string{"IBPATH_SOCKET=off"}, "100")
		if out != plain || !strings.Contains(errs, c.says) || !strings.Contains(errs, "every verb passes straight through") {
			t.Errorf("%s: stdout %q (without the shim %q), stderr:\n%s", filepath.Base(c.dir), out, plain, errs)
		}
	}
}

// TestPreloadVerbsInAConstructor: a library whose constructor uses verbs
// runs before the front's constructor; its verbs still reach the shim,
// which sets itself up then (the front loads the core on that first
// verb), and the program runs as without the shim, disabled or not. (The
// core preloaded alone hangs there: its Go runtime is not started yet.)
func TestPreloadVerbsInAConstructor(t *testing.T) {
	b := buildBed(t)
	td, _ := filepath.Abs("testdata")
	lib := filepath.Join(b.dir, "libctorverbs.so")
	prog := filepath.Join(b.dir, "ctorprog")
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-o", lib, filepath.Join(td, "ctorverbs.c"), "-L" + b.dir, "-libverbs", "-Wl,-rpath," + b.dir},
		{"-DCTORVERBS_MAIN", "-o", prog, filepath.Join(td, "ctorverbs.c"), "-L" + b.dir, "-Wl,--no-as-needed", "-lctorverbs", "-Wl,-rpath," + b.dir},
	} {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	run := func(env []string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, prog)
		// the stand-in libibverbs for the front's own DT_NEEDED too: it
		// is looked up before the library's, which alone has the RUNPATH
		c.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+b.dir), env...)
		var o, e strings.Builder
		c.Stdout, c.Stderr = &o, &e
		if err := c.Run(); err != nil {
			t.Fatalf("%v: %v (timed out: %v)\nstdout:\n%s\nstderr:\n%s", env, err, ctx.Err() != nil, o.String(), e.String())
		}
		return o.String(), e.String()
	}
	plain, _ := run(nil)
	if want := "constructor: 1 devices, open ok, cq ok\nmain\n"; plain != want {
		t.Fatalf("the program itself misbehaves: %q, want %q", plain, want)
	}
	for _, env := range [][]string{{"IBPATH_SOCKET=off", "IBPATH_LOG=info"}, {"IBPATH_DISABLE=1"}} {
		out, errs := run(append(env, "LD_PRELOAD="+b.shim))
		if out != plain || !strings.Contains(errs, "libibpath: loaded in pid") {
			t.Errorf("%v: stdout %q, want %q; stderr:\n%s", env, out, plain, errs)
		}
		if env[0] == "IBPATH_SOCKET=off" && !strings.Contains(errs, "device opened") {
			t.Errorf("%v: the constructor's device did not reach the shim:\n%s", env, errs)
		}
	}
}
