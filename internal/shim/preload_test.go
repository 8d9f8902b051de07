package shim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/daemon"
	"github.com/ibpath/ibpath/internal/status"
)

// preloadBed is the shim (its front, and its core next to it), a stand-in
// libibverbs (testdata/fakeverbs.c: one device, two Ethernet ports, a
// provider that completes everything at once) and a probe program linked
// against it that knows nothing of ibpath.
type preloadBed struct {
	dir, shim, probe string
}

// core is the path of the bed's shim core, which its front loads.
func (b preloadBed) core() string { return filepath.Join(filepath.Dir(b.shim), "libibpath-core.so") }

func buildBed(t testing.TB, tags ...string) preloadBed {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the shim tests build C programs")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("libibverbs-dev is not installed (verbs.h missing); .ci/run installs it")
	}
	dir := t.TempDir()
	b := preloadBed{dir: dir, shim: filepath.Join(dir, "libibpath.so"), probe: filepath.Join(dir, "probe")}
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	front, core := sharedShim(t, tags)
	if err := linkShim(front, b.shim); err != nil {
		t.Fatal(err)
	}
	if err := linkShim(core, b.core()); err != nil {
		t.Fatal(err)
	}
	td, _ := filepath.Abs("testdata")
	run("gcc", "-shared", "-fPIC", "-O2", "-o", filepath.Join(dir, "libibverbs.so.1"), "-Wl,-soname,libibverbs.so.1",
		"-Wl,--version-script="+filepath.Join(td, "fakeverbs.map"), filepath.Join(td, "fakeverbs.c"))
	if err := os.Symlink("libibverbs.so.1", filepath.Join(dir, "libibverbs.so")); err != nil {
		t.Fatal(err)
	}
	run("gcc", "-O2", "-o", b.probe, filepath.Join(td, "probe.c"), "-L"+dir, "-libverbs", "-Wl,-rpath,"+dir)
	return b
}

// program builds testdata/name.c against the bed's stand-in libibverbs and
// returns a bed whose probe it is.
func (b preloadBed) program(t testing.TB, name string) preloadBed {
	t.Helper()
	prog := filepath.Join(b.dir, name)
	td, _ := filepath.Abs("testdata")
	if out, err := exec.Command("gcc", "-O0", "-o", prog, filepath.Join(td, name+".c"), "-L"+b.dir, "-libverbs",
		"-Wl,-rpath,"+b.dir).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return preloadBed{dir: b.dir, shim: b.shim, probe: prog}
}

// cmd runs the probe, under the shim when env is not nil.
func (b preloadBed) cmd(env []string, args ...string) *exec.Cmd {
	c := exec.Command(b.probe, args...)
	c.Env = os.Environ()
	if env != nil {
		c.Env = append(c.Env, "LD_PRELOAD="+b.shim)
		c.Env = append(c.Env, env...)
	}
	return c
}

func (b preloadBed) run(t *testing.T, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	c := b.cmd(env, args...)
	var o, e strings.Builder
	c.Stdout, c.Stderr = &o, &e
	if err := c.Run(); err != nil {
		t.Fatalf("probe %v (env %v): %v\nstdout:\n%s\nstderr:\n%s", args, env, err, o.String(), e.String())
	}
	return o.String(), e.String()
}

// TestPreloadIsTransparent: the program sees exactly what it sees
// without the shim (completions, wr_ids, the provider's refusal and bad
// WR), and the shim says at load what is active.
func TestPreloadIsTransparent(t *testing.T) {
	b := buildBed(t)
	plain, _ := b.run(t, nil, "1000")
	if !strings.Contains(plain, "sends 250 recvs 1000") {
		t.Fatalf("the probe itself misbehaves: %s", plain)
	}
	shimmed, errs := b.run(t, []string{"IBPATH_LOG=info", "IBPATH_SOCKET=off"}, "1000")
	if shimmed != plain {
		t.Fatalf("the shim changed what the program saw:\nwithout: %s\nwith:    %s", plain, shimmed)
	}
	for _, want := range []string{"libibpath: loaded in pid", "shadow rings on", "ibpathd not used", "device opened", "device=fake0"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr under the shim lacks %q:\n%s", want, errs)
		}
	}
	// Disabled, and misconfigured: still transparent, and said so.
	out, errs := b.run(t, []string{"IBPATH_DISABLE=1"}, "100")
	if first, _ := b.run(t, nil, "100"); out != first || !strings.Contains(errs, "disabled by IBPATH_DISABLE") {
		t.Fatalf("IBPATH_DISABLE=1: stdout %q stderr %q", out, errs)
	}
	out, errs = b.run(t, []string{"IBPATH_APM=maybe"}, "100")
	if first, _ := b.run(t, nil, "100"); out != first || !strings.Contains(errs, `IBPATH_APM="maybe": want on or off`) || !strings.Contains(errs, "disables itself") {
		t.Fatalf("a bad IBPATH_APM: stdout %q stderr %q", out, errs)
	}
}

// TestPreloadCreateQPEx: a QP made through the inline ibv_create_qp_ex
// (the provider's create_qp_ex, which the shim takes over at open) is seen
// and protected like one from ibv_create_qp. One that posts through the
// ibv_wr_* API is protected when it asks only for the operations the
// shim follows ("exwr": the shim's ibv_wr_* functions build the batches,
// record them and issue them through the provider's), and seen but left
// alone, with the provider's functions, when it asks for another
// ("exinv": local invalidate). Either way the program sees what it sees
// without the shim, and so does the provider: the WRs it executed, in
// order, with their wr_id, flags, operands and payload bytes (inline
// data as given, though the program scribbles over its sources at once),
// an aborted batch and a refused one posting nothing of themselves.
func TestPreloadCreateQPEx(t *testing.T) {
	b := buildBed(t)
	for _, mode := range []struct {
		arg, want string
		wrIn      string // where the QP's ibv_wr_* functions are under the shim
	}{
		{"ex", "protected=true", ""},
		{"exwr", "protected=true", "libibpath-core.so"},
		{"exinv", "protected=false", "libibverbs.so.1"},
	} {
		plain, errs := b.run(t, nil, "200", mode.arg)
		want := []string{"sends 50 recvs 200 sum 200024950 refused 12 bad_is_wr 1", "done"}
		if mode.wrIn != "" {
			// 200 steps and the WR after the refusal; not the aborted
			// batch, the empty one or the refused one
			want = []string{"sends 50 recvs 200 sum 200024950 refused 12 none_posted 1",
				"after the refusal: complete 0, completions 1", "wire: wrs 201 ", "done"}
			if lib := "wr_start in libibverbs.so.1, wr_rdma_write in libibverbs.so.1, wr_complete in libibverbs.so.1"; !strings.Contains(errs, lib) {
				t.Fatalf("%s: without the shim the QP's ibv_wr_* functions are not the stand-in's (%q):\n%s", mode.arg, lib, errs)
			}
		}
		for _, w := range want {
			if !strings.Contains(plain, w) {
				t.Fatalf("%s: the probe itself misbehaves (no %q):\n%s\nstderr:\n%s", mode.arg, w, plain, errs)
			}
		}
		shimmed, errs := b.run(t, []string{"IBPATH_LOG=debug", "IBPATH_SOCKET=off"}, "200", mode.arg)
		if shimmed != plain {
			t.Fatalf("%s: the shim changed what the program or the provider saw:\nwithout: %s\nwith:    %s\nstderr:\n%s", mode.arg, plain, shimmed, errs)
		}
		if !strings.Contains(errs, "QP created") || !strings.Contains(errs, mode.want) {
			t.Errorf("%s: the shim's log lacks the QP (%s):\n%s", mode.arg, mode.want, errs)
		}
		if mode.wrIn != "" {
			lib := fmt.Sprintf("wr_start in %[1]s, wr_rdma_write in %[1]s, wr_complete in %[1]s", mode.wrIn)
			if !strings.Contains(errs, lib) {
				t.Errorf("%s: under the shim want the QP's ibv_wr_* functions in %s:\n%s", mode.arg, mode.wrIn, errs)
			}
		}
	}

	// "exwrmt": eight threads post one-WR batches to one such QP at once.
	// wr_start to wr_complete hold the queue's lock, the shim's as the
	// provider's: every batch reaches the provider. (A batch emptied
	// after the lock's release lost another thread's WRs, or failed them,
	// about once in a million batches on two CPUs: this catches such a
	// race most runs, not every run.)
	const batches = 250000
	plain, errs := b.run(t, nil, fmt.Sprint(batches), "exwrmt")
	want := fmt.Sprintf("threads 8 batches %d failed 0; wire: wrs %d bytes %d", 8*batches, 8*batches, 8*8*batches)
	if !strings.Contains(plain, want) {
		t.Fatalf("exwrmt: the probe itself misbehaves (no %q):\n%s\nstderr:\n%s", want, plain, errs)
	}
	shimmed, errs := b.run(t, []string{"IBPATH_LOG=info", "IBPATH_SOCKET=off"}, fmt.Sprint(batches), "exwrmt")
	if shimmed != plain || !strings.Contains(errs, "wr_start in libibpath-core.so") {
		t.Fatalf("exwrmt: the shim lost or failed batches of threads posting at once:\nwithout: %s\nwith:    %s\nstderr:\n%s", plain, shimmed, errs)
	}
}

// TestPreloadSeesPortEvents: the program never reads async events, yet
// the shim sees the port go down and up, on a context of its own, and
// the program's output is unchanged.
func TestPreloadSeesPortEvents(t *testing.T) {
	b := buildBed(t)
	plain, _ := b.run(t, nil, "100", "event")
	out, errs := b.run(t, []string{"IBPATH_LOG=info", "IBPATH_SOCKET=off"}, "100", "event")
	if out != plain {
		t.Fatalf("the shim changed what the program saw:\nwithout: %s\nwith:    %s", plain, out)
	}
	for _, want := range []string{"fake0 PORT_ERR port 1", "fake0 PORT_ACTIVE port 1"} {
		if !strings.Contains(errs, want) {
			t.Errorf("the shim did not log %q:\n%s", want, errs)
		}
	}
	if strings.Count(errs, "device opened") != 1 {
		t.Errorf("the shim's own context was taken for the application's:\n%s", errs)
	}
}

// TestPreloadReportsToIbpathd: a program under the shim attaches to
// ibpathd, which lists its QP with the owner's pid and the reason layer 1
// cannot protect it on RoCE, relays a migrate to it (and gets the shim's
// refusal), and forgets the QP when the program destroys it.
func TestPreloadReportsToIbpathd(t *testing.T) {
	b := buildBed(t)
	sock := filepath.Join(b.dir, "ibpathd.sock")
	d, err := daemon.New(daemon.Config{Node: "n0", Socket: sock, StateDir: b.dir, Fabric: "sim",
		Sim: daemon.SimConfig{Hosts: 2}, Repl: daemon.ReplConfig{Off: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	ready := make(chan struct{})
	go func() { served <- d.Serve(context.Background(), func() error { close(ready); return nil }) }()
	<-ready
	defer func() { d.Close(); <-served }()
	c := api.NewClient(sock, 5*time.Second)

	p := b.cmd([]string{"IBPATH_SOCKET=" + sock, "IBPATH_LOG=info"}, "100", "wait")
	stdin, err := p.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := p.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	p.Stderr = &stderr
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Process.Kill()
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "READY" {
	}
	var q status.QP
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(n.QPs) == 1 && n.QPs[0].APM != "-" {
			q = n.QPs[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the probe's QP never reached ibpathd: %+v\nprobe stderr:\n%s", n.QPs, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if q.Device != "fake0" || q.QPN != 0x100 || q.OwnerPID != p.Process.Pid || q.APM != "unsupported" ||
		!strings.Contains(q.Reason, "RoCE") || q.Remote.String() != "10.0.0.2 qpn 0x4242" || q.Primary.String() != "port 1" {
		t.Fatalf("the QP as ibpathd shows it: %+v", q)
	}
	res, err := c.Migrate(context.Background(), api.Target{Device: "fake0", QPN: 0x100}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 1 || res.Results[0].OK || !strings.Contains(res.Results[0].Error, "RoCE has no automatic path migration") {
		t.Fatalf("relayed migrate: %+v", res)
	}
	fmt.Fprintln(stdin, "go")
	rest, _ := io.ReadAll(stdout)
	if err := p.Wait(); err != nil || !strings.Contains(string(rest), "done") {
		t.Fatalf("probe: %v %s\n%s", err, rest, stderr.String())
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		n, _ := c.Status(context.Background())
		if len(n.QPs) == 0 && len(n.Owners) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the QP or owner stayed after the program ended: %+v %+v", n.QPs, n.Owners)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "attached to ibpathd") {
		t.Fatalf("the shim did not say it attached:\n%s", stderr.String())
	}
}

// TestPreloadCompletionChannel: a program that waits for its completions
// on a completion channel (poll(2) on the channel's fd, blocking
// ibv_get_cq_event while another thread posts, a non-blocking get with
// nothing pending, ibv_ack_cq_events, EBUSY for a channel still in use,
// every event acknowledged when its CQ is destroyed) sees exactly what it
// sees without the shim, with the CQ from ibv_create_cq or from the
// inline ibv_create_cq_ex (the context's create_cq_ex slot). With
// completion channels on, its channel is the shim's (an epoll fd); with
// IBPATH_CHANNELS=off, libibverbs's own. The front carries the symbol
// versions (libibpath.map), whose IBVERBS_1.0 verbs must still bind; the
// core, without versions, is also preloaded alone (as on machines without
// the front).
func TestPreloadCompletionChannel(t *testing.T) {
	b := buildBed(t)
	const epollFD, pipeFD = "probe: channel fd is anon_inode:[eventpoll]", "probe: channel fd is pipe"
	for _, mode := range []string{"chan", "chanex"} {
		plain, errs := b.run(t, nil, "300", mode)
		for _, want := range []string{"sends 75 recvs 300 sum 300056175", "events 300 (blocking 6)",
			"non-blocking get with none pending: EAGAIN",
			"destroy channel with its CQ: EBUSY", "done"} {
			if !strings.Contains(plain, want) {
				t.Fatalf("%s: the probe itself misbehaves (no %q):\n%s\nstderr:\n%s", mode, want, plain, errs)
			}
		}
		if !strings.Contains(errs, pipeFD) {
			t.Fatalf("%s: without the shim the channel's fd is not the stand-in's pipe:\n%s", mode, errs)
		}
		for _, run := range []struct {
			name, shim string
			env        []string
			fd, banner string
		}{
			{"shim", b.shim, []string{"IBPATH_LOG=info", "IBPATH_SOCKET=off"}, epollFD, "completion channels on"},
			{"shim IBPATH_CHANNELS=off", b.shim, []string{"IBPATH_LOG=info", "IBPATH_SOCKET=off", "IBPATH_CHANNELS=off"}, pipeFD, "completion channels off"},
			{"core alone", b.core(), []string{"IBPATH_LOG=info", "IBPATH_SOCKET=off"}, epollFD, "completion channels on"},
		} {
			bed := b
			bed.shim = run.shim
			out, errs := bed.run(t, run.env, "300", mode)
			if out != plain {
				t.Errorf("%s, %s: the shim changed what the program saw:\nwithout: %s\nwith:    %s\nstderr:\n%s", mode, run.name, plain, out, errs)
			}
			if !strings.Contains(errs, run.fd) || !strings.Contains(errs, run.banner) {
				t.Errorf("%s, %s: want %q and %q on stderr:\n%s", mode, run.name, run.fd, run.banner, errs)
			}
		}
	}
}

// TestPreloadCQHeadroom: with the switch back on, every CQ the program
// creates (ibv_create_cq, ibv_create_cq_ex) or resizes gets
// IBPATH_CQ_HEADROOM entries more than it asks for, for the switch back's
// own completions; the attributes it passed come back unchanged. A size
// the device refuses with the headroom is given without it. With the
// switch back off the sizes are the program's.
func TestPreloadCQHeadroom(t *testing.T) {
	b := buildBed(t)
	for _, c := range []struct {
		env  []string
		n    string
		want string
	}{
		{nil, "256", "create 256 create_ex 256 resized 512"},
		{[]string{"IBPATH_SWITCHBACK=on"}, "256", "create 320 create_ex 320 resized 576"},
		{[]string{"IBPATH_SWITCHBACK=on", "IBPATH_CQ_HEADROOM=8"}, "1", "create 9 create_ex 9 resized 10"},
		{[]string{"IBPATH_SWITCHBACK=off"}, "1", "create 1 create_ex 1 resized 2"},
		// the stand-in device's CQs hold at most 100000 entries
		{[]string{"IBPATH_SWITCHBACK=on"}, "49990", "create 50054 create_ex 50054 resized 99980"},
		{[]string{"IBPATH_SWITCHBACK=on"}, "99990", "create 99990 create_ex 99990"},
	} {
		env := append([]string{"IBPATH_SOCKET=off"}, c.env...)
		cmd := b.cmd(env, c.n, "cqe")
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if c.n == "99990" {
			// twice 99990 exceeds the device: the resize fails as without the shim
			if err == nil || !strings.HasPrefix(o.String(), c.want) || !strings.Contains(e.String(), "ibv_resize_cq") {
				t.Errorf("%v %s: %v, stdout %q stderr %q", c.env, c.n, err, o.String(), e.String())
			}
			continue
		}
		if err != nil || strings.TrimSpace(o.String()) != c.want {
			t.Errorf("%v %s: %v, stdout %q, want %q\nstderr:\n%s", c.env, c.n, err, o.String(), c.want, e.String())
		}
	}
}

// TestPreloadNudgeSlot: on a device with InfiniBand ports, an RC QP made
// by ibv_create_qp or ibv_create_qp_ex asks the provider for one send WR
// more than the program did (the slot of layer 1's nudge), and the
// program is told the size it asked for, at creation and by
// ibv_query_qp; a QP with sq_sig_all, a RoCE
// device, IBPATH_NUDGE=off, layer 1 off, or no shim get none. A size the
// device refuses with the slot is given without it.
func TestPreloadNudgeSlot(t *testing.T) {
	b := buildBed(t)
	for _, c := range []struct {
		env  []string
		n    string
		want string
	}{
		{nil, "64", "create 64/64 create_ex 64/64 sig_all 64/64 query 64/64"},
		{[]string{}, "64", "create 64/65 create_ex 64/65 sig_all 64/64 query 64/64"},
		{[]string{"IBPATH_NUDGE=off"}, "64", "create 64/64 create_ex 64/64 sig_all 64/64 query 64/64"},
		{[]string{"IBPATH_APM=off"}, "64", "create 64/64 create_ex 64/64 sig_all 64/64 query 64/64"},
		{[]string{"IBPATH_SINGLE_POSTER=1"}, "64", "create 64/64 create_ex 64/64 sig_all 64/64 query 64/64"},
		// the stand-in device makes send queues of at most 65536 WRs
		{[]string{}, "65536", "create 65536/65536 create_ex 65536/65536 sig_all 65536/65536 query 65536/65536"},
		{[]string{}, "65535", "create 65535/65536 create_ex 65535/65536 sig_all 65535/65535 query 65535/65535"},
	} {
		env := []string{"FAKE_LINK_LAYER=ib"}
		if c.env != nil {
			env = append(env, "IBPATH_SOCKET=off")
			env = append(env, c.env...)
		}
		cmd := b.cmd(nil, c.n, "sq")
		if c.env != nil {
			cmd = b.cmd(env, c.n, "sq")
		} else {
			cmd.Env = append(cmd.Env, env...)
		}
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil || strings.TrimSpace(o.String()) != c.want {
			t.Errorf("%v %s: %v, stdout %q, want %q\nstderr:\n%s", c.env, c.n, err, o.String(), c.want, e.String())
		}
	}
	// on RoCE ports nothing is added
	cmd := b.cmd([]string{"IBPATH_SOCKET=off"}, "64", "sq")
	if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != "create 64/64 create_ex 64/64 sig_all 64/64 query 64/64" {
		t.Errorf("RoCE: %v, %q", err, out)
	}
}

// TestPreloadImplicitODP: a program that registers an implicit
// on-demand-paging region (NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND) keeps
// running under the shim, with what the provider returned. (The shim
// once made a slice of SIZE_MAX bytes of it, and the Go runtime's panic
// killed the process.) With a backup device that has implicit ODP, the
// shim mirrors the region there by an implicit registration of its own;
// with one that refuses it (EINVAL), it says the region is not
// mirrored, and why.
func TestPreloadImplicitODP(t *testing.T) {
	b := buildBed(t)
	plain, _ := b.run(t, nil, "1", "odp")
	if !strings.HasPrefix(plain, "registered ") {
		t.Fatalf("the probe itself misbehaves: %q", plain)
	}
	for _, c := range []struct {
		env      []string
		has, not string
	}{
		{nil, "", "implicit on-demand-paging region mirrored"}, // no backup device
		{[]string{"FAKE_DEVICES=2"}, "implicit on-demand-paging region mirrored on the backup device", "MR not mirrored"},
		{[]string{"FAKE_DEVICES=2", "FAKE_NO_IMPLICIT_ODP=1"}, "MR not mirrored on the backup device", "region mirrored"},
	} {
		out, errs := b.run(t, append([]string{"IBPATH_SOCKET=off", "IBPATH_LOG=info"}, c.env...), "1", "odp")
		if out != plain {
			t.Fatalf("%v: stdout %q under the shim, %q without", c.env, out, plain)
		}
		if !strings.Contains(errs, c.has) || strings.Contains(errs, c.not) {
			t.Fatalf("%v: the shim's account of the region: want %q and not %q:\n%s", c.env, c.has, c.not, errs)
		}
		if len(c.env) == 2 && !strings.Contains(errs, "does not register") {
			t.Fatalf("the shim did not say why the region is not mirrored:\n%s", errs)
		}
	}
}

// TestPreloadMemoryVerbs: a program registering GPU memory through
// ibv_reg_dmabuf_mr (the region, its keys, the failure of a closed fd,
// the deregistration), and one that moves a region with ibv_rereg_mr,
// changes its access and has a move refused, see under the shim what
// they see without it.
func TestPreloadMemoryVerbs(t *testing.T) {
	b := buildBed(t)
	for _, c := range []struct{ mode, n, prefix, has string }{
		{"dmabuf", "1", "dmabuf lkey ", "closed fd: Bad file descriptor"},
		{"rereg", "1", "rereg 0 moved 1 lkey ", "refused -1, still at b 1"},
		// SRQ verbs, ibv_post_srq_recv through the context's op, a QP
		// on the SRQ (followed only with a backup device: the
		// stand-in has one device)
		{"srq", "9", "srq: 9 posted, 1 refused, post_recv on its QP refused 1, query 0 srq 1", "srq wc 108 qp 1 status 0"},
	} {
		plain, _ := b.run(t, nil, c.n, c.mode)
		if !strings.HasPrefix(plain, c.prefix) || !strings.Contains(plain, c.has) {
			t.Fatalf("%s: the probe itself misbehaves: %s", c.mode, plain)
		}
		out, errs := b.run(t, []string{"IBPATH_SOCKET=off", "IBPATH_LOG=info"}, c.n, c.mode)
		if out != plain {
			t.Fatalf("%s: the shim changed what the program saw:\nwithout: %s\nwith:    %s\n%s", c.mode, plain, out, errs)
		}
		if c.mode != "srq" {
			continue
		}
		// with a backup device the SRQ is followed: its receives go
		// through the shim's ring, its QPs are protected
		out, errs = b.run(t, []string{"IBPATH_SOCKET=off", "IBPATH_LOG=debug", "FAKE_DEVICES=2"}, c.n, c.mode)
		if out != plain || !strings.Contains(errs, "layer 2 follows an SRQ") {
			t.Fatalf("srq with a backup: the shim changed what the program saw, or did not follow the SRQ:\nwithout: %s\nwith:    %s\n%s", plain, out, errs)
		}
	}
}

// TestPreloadDestroyRefused: the provider refuses an ibv_destroy_qp
// (EBUSY). The program sees the refusal as without the shim, with the
// same errno, and the QP works on: its posts and completions are the
// same, and the shim keeps it protected (layer 2's backup stays) until
// the destroy that succeeds.
func TestPreloadDestroyRefused(t *testing.T) {
	b := buildBed(t)
	env := []string{"FAKE_DESTROY_QP_BUSY=1"}
	plain, _ := b.run(t, env, "20")
	if !strings.Contains(plain, "destroy refused: EBUSY, errno EBUSY; then 1 sends 4 recvs") || !strings.Contains(plain, "destroyed on the second try: 0") {
		t.Fatalf("the probe itself misbehaves: %s", plain)
	}
	out, errs := b.run(t, append(env, "IBPATH_SOCKET=off", "IBPATH_LOG=info", "FAKE_DEVICES=2"), "20")
	if out != plain {
		t.Fatalf("the shim changed what the program saw:\nwithout: %s\nwith:    %s\n%s", plain, out, errs)
	}
	if !strings.Contains(errs, "ibv_destroy_qp failed; the QP stays protected as it was") || !strings.Contains(errs, "errno=\"device or resource busy\"") {
		t.Fatalf("the shim did not keep the QP of the refused destroy:\n%s", errs)
	}
}

// TestPreloadMissingVerb: a libibverbs without a verb the shim
// interposes (ibv_rereg_mr here): the program's call fails as the verb's
// failure (IBV_REREG_MR_ERR_INPUT, errno ENOSYS), the shim says why, and
// the process goes on (it used to abort).
func TestPreloadMissingVerb(t *testing.T) {
	b := buildBed(t)
	td, _ := filepath.Abs("testdata")
	other := filepath.Join(b.dir, "norereg")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join(td, "fakeverbs.map"))
	if err != nil {
		t.Fatal(err)
	}
	mapFile := filepath.Join(other, "fakeverbs.map")
	if err := os.WriteFile(mapFile, []byte(strings.Replace(string(m), " ibv_rereg_mr;", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-DFAKE_NO_REREG", "-o", filepath.Join(other, "libibverbs.so.1"),
		"-Wl,-soname,libibverbs.so.1", "-Wl,--version-script="+mapFile, filepath.Join(td, "fakeverbs.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	c := b.cmd([]string{"IBPATH_SOCKET=off", "LD_LIBRARY_PATH=" + other}, "1", "rereg")
	var o, e strings.Builder
	c.Stdout, c.Stderr = &o, &e
	if err := c.Run(); err != nil || !strings.HasPrefix(o.String(), "rereg -1 moved 0 ") ||
		!strings.Contains(e.String(), "ibv_rereg_mr@IBVERBS_1.1 not found") || !strings.Contains(e.String(), "fails with ENOSYS") {
		t.Fatalf("probe: %v (want the calls to fail and the program to end well)\nstdout %s\nstderr %s", err, o.String(), e.String())
	}
}

// TestPreloadTablesFull: more RC QPs on one InfiniBand context than the
// shim's table holds: those past it are not protected (said once each),
// and none shows the nudge's send slot, not even those made with it
// before the table refused them (they are made again without it).
func TestPreloadTablesFull(t *testing.T) {
	b := buildBed(t)
	out, errs := b.run(t, []string{"IBPATH_SOCKET=off", "FAKE_LINK_LAYER=ib"}, "4200", "fill")
	if strings.TrimSpace(out) != "fill 4200: told otherwise 0, shown otherwise 0" {
		t.Fatalf("stdout %q\nstderr (tail):\n%s", out, tail(errs, 2000))
	}
	if !strings.Contains(errs, "the shim's QP tables are full") {
		t.Fatalf("the shim did not say its tables are full:\n%s", tail(errs, 2000))
	}
}

// TestPreloadStartPoll: a program that polls an extended CQ with
// ibv_start_poll, ibv_next_poll and ibv_end_poll sees under the shim
// exactly what it sees without it (every completion, in order); the
// shim takes the CQ's start_poll slot, and its first call tells layer 2,
// which leaves the CQ's QPs (said once, at info).
func TestPreloadStartPoll(t *testing.T) {
	b := buildBed(t)
	plain, _ := b.run(t, nil, "200", "exstart")
	if !strings.Contains(plain, "sends 50 recvs 200") {
		t.Fatalf("the probe itself misbehaves: %s", plain)
	}
	out, errs := b.run(t, []string{"IBPATH_SOCKET=off", "IBPATH_LOG=info"}, "200", "exstart")
	if out != plain {
		t.Fatalf("the shim changed what the program saw:\nwithout: %s\nwith:    %s", plain, out)
	}
	if n := strings.Count(errs, "a CQ is polled with ibv_start_poll"); n != 1 {
		t.Fatalf("%d lines say the CQ is polled with ibv_start_poll, want 1:\n%s", n, errs)
	}
}

// TestPreloadPanicsRecovered: with the ibpath_faultinject build, each
// export the probe reaches panics in turn (IBPATH_FAULT_PANIC): the
// program sees exactly what it sees without the shim, and the shim says
// it recovered, once per export. (The exports of the data path of a QP
// layer 2 took over, ibpathPostSend, ibpathPostRecv, ibpathPollCQ,
// ibpathIntercept and ibpathExpressSurfaced, need a backup device, which
// the stand-in provider does not have.)
func TestPreloadPanicsRecovered(t *testing.T) {
	b := buildBed(t, "ibpath_faultinject")
	for _, c := range []struct {
		export string
		args   []string
		env    []string
	}{
		{"ibpathInit", []string{"100"}, nil},
		{"ibpathOpened", []string{"100"}, nil},
		{"ibpathClosed", []string{"100"}, nil},
		{"ibpathCreated", []string{"100"}, nil},
		{"ibpathCreatedEx", []string{"100", "ex"}, nil},
		{"ibpathAfterModify", []string{"100"}, nil},
		{"ibpathLayer1Wants", []string{"100"}, []string{"FAKE_LINK_LAYER=ib"}},
		{"ibpathModify", []string{"100"}, []string{"FAKE_LINK_LAYER=ib"}},
		{"ibpathDestroying", []string{"100"}, nil},
		{"ibpathDestroyed", []string{"100"}, nil},
		{"ibpathMR", []string{"1", "odp"}, nil},
		{"ibpathDeregMR", []string{"1", "odp"}, nil},
		{"ibpathCQExtended", []string{"100", "chanex"}, nil},
		{"ibpathCQPolled", []string{"100", "chanex"}, nil},
		{"ibpathCQStartPoll", []string{"100", "exstart"}, nil},
		{"ibpathCQStartPollGone", []string{"100", "exstart"}, nil},
		{"ibpathCQCreated", []string{"100"}, []string{"IBPATH_SWITCHBACK=on"}},
		{"ibpathCQDestroyed", []string{"100"}, []string{"IBPATH_SWITCHBACK=on"}},
	} {
		plainCmd := b.cmd(nil, c.args...)
		plainCmd.Env = append(plainCmd.Env, c.env...)
		plain, err := plainCmd.Output()
		if err != nil {
			t.Fatalf("%v without the shim: %v", c.args, err)
		}
		env := append([]string{"IBPATH_SOCKET=off", "IBPATH_FAULT_PANIC=" + c.export}, c.env...)
		cmd := b.cmd(env, c.args...)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil || o.String() != string(plain) {
			t.Errorf("%s: %v; stdout %q, want %q\nstderr:\n%s", c.export, err, o.String(), plain, e.String())
			continue
		}
		if !strings.Contains(e.String(), "panic recovered in "+c.export+":") {
			t.Errorf("%s: the shim did not say it recovered:\n%s", c.export, e.String())
		}
	}
}
