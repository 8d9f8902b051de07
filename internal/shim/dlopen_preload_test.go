package shim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dlopenBed is the preload bed with dlprobe (testdata/dlprobe.c), a
// program that opens libibverbs itself as NCCL before 2.30 does, a
// library only its DT_RUNPATH finds, and a second copy of the stand-in
// libibverbs elsewhere.
type dlopenBed struct {
	preloadBed
	dlprobe, other string
}

func buildDlopenBed(t *testing.T) dlopenBed {
	t.Helper()
	b := dlopenBed{preloadBed: buildBed(t)}
	td, _ := filepath.Abs("testdata")
	gcc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// the shim as cmd/libibpath/build.sh makes it, with libibverbs's
	// symbol versions: dlvsym does not take an unversioned definition
	// in a library that has a version table (glibc's check_match with
	// a hidden version), so NCCL's lookups at IBVERBS_1.1 need them
	build := exec.Command("cmd/libibpath/build.sh", b.shim)
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cmd/libibpath/build.sh: %v\n%s", err, out)
	}
	sub := filepath.Join(b.dir, "sub")
	b.other = filepath.Join(b.dir, "other", "libibverbs.so.1")
	for _, d := range []string{sub, filepath.Dir(b.other)} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(b.dir, "dlrun.c")
	if err := os.WriteFile(src, []byte("int dlrun(void) { return 42; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gcc("-shared", "-fPIC", "-o", filepath.Join(sub, "libdlrun.so"), src)
	lib, err := os.ReadFile(filepath.Join(b.dir, "libibverbs.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.other, lib, 0o755); err != nil {
		t.Fatal(err)
	}
	b.dlprobe = filepath.Join(b.dir, "dlprobe")
	gcc("-O2", "-o", b.dlprobe, filepath.Join(td, "dlprobe.c"), "-ldl", "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/sub")
	return b
}

// run runs dlprobe with args, under the shim when env is not nil, with
// the stand-in libibverbs (InfiniBand ports) first on the search path.
func (b dlopenBed) run(t *testing.T, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	c := exec.Command(b.dlprobe, args...)
	c.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "FAKE_LINK_LAYER=ib", "IBPATH_SOCKET=off")
	if env != nil {
		c.Env = append(c.Env, "LD_PRELOAD="+b.shim)
		c.Env = append(c.Env, env...)
	}
	var o, e strings.Builder
	c.Stdout, c.Stderr = &o, &e
	if err := c.Run(); err != nil {
		t.Fatalf("dlprobe %v (env %v): %v\nstdout:\n%s\nstderr:\n%s", args, env, err, o.String(), e.String())
	}
	return strings.TrimSpace(o.String()), e.String()
}

// TestPreloadDlopen: a program that opens libibverbs with dlopen and
// resolves its verbs on that handle gets the shim's verbs (its QP has
// the nudge slot only the shim adds), by either name NCCL tries; not
// with IBPATH_DLOPEN=off, IBPATH_DISABLE=1 or a value that does not
// parse, and not when the file it opens is another libibverbs (said on
// stderr: that program is unprotected). Every other dlopen reaches the
// real one as the program made it (its RUNPATH searched).
func TestPreloadDlopen(t *testing.T) {
	b := buildDlopenBed(t)
	for _, c := range []struct {
		env    []string
		args   []string
		want   string
		stderr string
	}{
		{nil, []string{"verbs"}, "create 64/64", ""},
		{[]string{}, []string{"verbs"}, "create 64/65", ""},
		{[]string{"IBPATH_DLOPEN=on"}, []string{"verbs", "libibverbs.so"}, "create 64/65", ""},
		{[]string{}, []string{"verbs", filepath.Join(b.dir, "libibverbs.so.1")}, "create 64/65", ""},
		{[]string{"IBPATH_DLOPEN=off"}, []string{"verbs"}, "create 64/64", ""},
		{[]string{"IBPATH_DLOPEN=OFF"}, []string{"verbs"}, "create 64/64", ""},
		{[]string{"IBPATH_DISABLE=1"}, []string{"verbs"}, "create 64/64", ""},
		{[]string{"IBPATH_DLOPEN=maybe"}, []string{"verbs"}, "create 64/64", `IBPATH_DLOPEN="maybe": want on or off`},
		{[]string{}, []string{"verbs", b.other}, "create 64/64", "is not the libibverbs the shim interposes"},
	} {
		out, errs := b.run(t, c.env, c.args...)
		if out != c.want {
			t.Errorf("%v %v: %q, want %q\nstderr:\n%s", c.env, c.args, out, c.want, errs)
		}
		if c.stderr != "" && !strings.Contains(errs, c.stderr) {
			t.Errorf("%v %v: stderr lacks %q:\n%s", c.env, c.args, c.stderr, errs)
		}
		if c.stderr == "" && strings.Contains(errs, "not protected") {
			t.Errorf("%v %v: stderr says unprotected:\n%s", c.env, c.args, errs)
		}
	}
	// the shim says at its first verb that the program got its handle
	_, errs := b.run(t, []string{"IBPATH_LOG=info"}, "verbs")
	if !strings.Contains(errs, "it got the shim's handle") ||
		!strings.Contains(errs, "libibverbs opened by the program with dlopen: the shim's verbs") {
		t.Errorf("IBPATH_LOG=info: no word of the dlopen:\n%s", errs)
	}
	// its banner names the version build.sh linked in (scripts/version)
	ver, err := exec.Command(filepath.Join("..", "..", "scripts", "version")).Output()
	if err != nil {
		t.Fatalf("scripts/version: %v", err)
	}
	if want := "libibpath: loaded in pid "; !strings.Contains(errs, want) ||
		!strings.Contains(errs, ", version "+strings.TrimSpace(string(ver))+" (") {
		t.Errorf("the banner does not name version %s:\n%s", strings.TrimSpace(string(ver)), errs)
	}
	// Every other dlopen is the real one as the program called it: a
	// library found only through the calling program's DT_RUNPATH loads
	// (dlopen searches its caller's RUNPATH, so a wrapper calling it from
	// the shim would not find it), and a failed dlopen of libibverbs says
	// what it says without the shim.
	for _, mode := range []string{"runpath", "missing"} {
		plain, _ := b.run(t, nil, mode)
		shimmed, errs := b.run(t, []string{}, mode)
		if plain != shimmed {
			t.Errorf("%s: %q under the shim, %q without\nstderr:\n%s", mode, shimmed, plain, errs)
		}
		if mode == "runpath" && plain != "runpath 42" {
			t.Errorf("runpath without the shim: %q", plain)
		}
	}
}
