package pathsel

import (
	"cmp"
	"math"
	"strings"
	"testing"
	"time"
)

const sec = time.Second

// flap is a down event of k at now and its end at once; it reports
// whether k is suppressed after it.
func flap(d *Damper[string], k string, now time.Duration) bool {
	sup := d.Down(k, now)
	d.Up(k, now)
	return sup
}

func newDamper(t *testing.T, c DampingConfig) *Damper[string] {
	t.Helper()
	d, err := NewDamper[string](c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDampingTwoFlapsWithinAHalfLife: two flaps suppress when the second
// comes within a half-life of the first (the penalty is 1500 then), not
// after; two 30 s apart are reused 30 s after the second.
func TestDampingTwoFlapsWithinAHalfLife(t *testing.T) {
	d := newDamper(t, DampingConfig{})
	flap(d, "p", 0)
	if !flap(d, "p", 30*sec) {
		t.Fatalf("two flaps a half-life apart: %+v", d.State("p", 30*sec))
	}
	if at, _ := d.ReuseAt("p", 30*sec); (at - 30*sec).Round(sec) != 30*sec {
		t.Fatalf("reused %v after the second flap, want 30 s", at-30*sec)
	}
	flap(d, "q", 0)
	if flap(d, "q", 31*sec) {
		t.Fatalf("two flaps more than a half-life apart: %+v", d.State("q", 31*sec))
	}
	d.Forget("p")
	if st := d.State("p", 30*sec); st.Flaps != 0 {
		t.Fatalf("forgotten key: %+v", st)
	}
}

// TestDampingOneFlapNeverSuppresses: a port that went down once is not
// kept from traffic; its penalty halves every half-life and it is
// forgotten below reuse/2.
func TestDampingOneFlapNeverSuppresses(t *testing.T) {
	d := newDamper(t, DampingConfig{})
	if flap(d, "mlx5_0:1", 0) {
		t.Fatal("one flap suppressed the port")
	}
	if st := d.State("mlx5_0:1", 30*sec); math.Abs(st.Penalty-500) > 1e-6 || st.Suppressed || st.Flaps != 1 {
		t.Fatalf("after one half-life: %+v, want penalty 500, 1 flap", st)
	}
	// 1000 decays to 375 (reuse/2) in 30·log2(1000/375) = 42.45 s
	if st := d.State("mlx5_0:1", 43*sec); st.Penalty != 0 || st.Flaps != 0 {
		t.Fatalf("not forgotten below reuse/2: %+v", st)
	}
	if len(d.keys) != 0 {
		t.Fatalf("%d keys kept", len(d.keys))
	}
}

// TestDampingSuppressAndReuse: two flaps back to back suppress the port
// for 30·log2(2000/750) = 42.45 s; ReuseAt says when, and the port is
// reusable then, not a microsecond before.
func TestDampingSuppressAndReuse(t *testing.T) {
	d := newDamper(t, DampingConfig{})
	flap(d, "p", 0)
	if !flap(d, "p", 0) {
		t.Fatal("two flaps back to back did not suppress")
	}
	at, ok := d.ReuseAt("p", 10*sec)
	want := time.Duration(math.Log2(2000.0/750) * float64(30*sec))
	if !ok || at < want || at > want+2*time.Microsecond {
		t.Fatalf("ReuseAt %v %v, want %v", at, ok, want)
	}
	for now := 10 * sec; now < at; now += 333 * time.Millisecond {
		if again, _ := d.ReuseAt("p", now); again != at {
			t.Fatalf("ReuseAt moved from %v to %v at %v with no new flap", at, again, now)
		}
	}
	if !d.Suppressed("p", at-2*time.Microsecond) {
		t.Fatal("reusable before ReuseAt")
	}
	if d.Suppressed("p", at) {
		t.Fatalf("still suppressed at ReuseAt: %+v", d.State("p", at))
	}
	if _, ok := d.ReuseAt("p", at); ok {
		t.Fatal("ReuseAt of a key no longer suppressed")
	}
}

// TestDampingFlapsFiveSecondsApart: the figure the package comment
// gives: three flaps 5 s apart keep the port 55 s after the last.
func TestDampingFlapsFiveSecondsApart(t *testing.T) {
	d := newDamper(t, DampingConfig{})
	flap(d, "p", 0)
	flap(d, "p", 5*sec)
	if !flap(d, "p", 10*sec) {
		t.Fatal("three flaps in 10 s did not suppress")
	}
	at, _ := d.ReuseAt("p", 10*sec)
	if got := (at - 10*sec).Round(sec); got != 55*sec {
		t.Fatalf("reused %v after the last flap, want 55 s", got)
	}
}

// TestDampingCeiling: however fast and long a port flaps, it is reused
// at most MaxSuppress after its last flap: at 100 flaps a second the
// penalty reaches the ceiling (300 s); at 10 a second it settles at
// 1000/(1-2^(-0.1/30)), 433,000, which decays to reuse in 275 s.
func TestDampingCeiling(t *testing.T) {
	for _, c := range []struct {
		every time.Duration
		want  time.Duration
	}{{10 * time.Millisecond, 300 * sec}, {100 * time.Millisecond, 275 * sec}} {
		d := newDamper(t, DampingConfig{})
		now := time.Duration(0)
		for range 2000 {
			flap(d, "p", now)
			now += c.every
		}
		last := now - c.every
		at, ok := d.ReuseAt("p", last)
		if got := at - last; !ok || got > 300*sec+time.Millisecond || got.Round(sec) != c.want {
			t.Errorf("a flap every %v: reused %v after the last flap (%v), want %v", c.every, got, ok, c.want)
		}
		if st := d.State("p", last); st.Flaps != 2000 || st.Penalty > d.Config().Ceiling()+1e-6 {
			t.Errorf("a flap every %v: %+v, ceiling %v", c.every, st, d.Config().Ceiling())
		}
	}
}

// TestDampingHysteresis: a suppressed key stays suppressed until its
// penalty is below reuse, though under suppress; one never suppressed is
// not suppressed at the same penalty.
func TestDampingHysteresis(t *testing.T) {
	d := newDamper(t, DampingConfig{})
	flap(d, "a", 0)
	flap(d, "a", 0) // 2000: suppressed
	flap(d, "b", 0)
	flap(d, "b", 40*sec) // 1000·2^(-4/3) + 1000 = 1397: not
	// at 40 s: a 2000·2^(-4/3) = 794, between reuse and suppress
	if !d.Suppressed("a", 40*sec) || d.Suppressed("b", 40*sec) {
		t.Fatalf("a %+v, b %+v", d.State("a", 40*sec), d.State("b", 40*sec))
	}
	states := d.States(40*sec, cmp.Compare[string])
	if len(states) != 2 || states[0].Key != "a" || states[1].Key != "b" || states[0].ReuseIn <= 0 || states[1].ReuseIn != 0 {
		t.Fatalf("states %+v", states)
	}
}

// TestDampingKeysIndependent: a flapping port does not damp another.
func TestDampingKeysIndependent(t *testing.T) {
	d := newDamper(t, DampingConfig{})
	for range 5 {
		flap(d, "mlx5_0:1", 0)
	}
	if d.Suppressed("mlx5_0:2", 0) || d.Suppressed("mlx5_1:1", 0) || !d.Suppressed("mlx5_0:1", 0) {
		t.Fatal("damping leaked between keys")
	}
}

// TestDampingConfigErrors: bad settings are refused with the setting
// named, never defaulted silently.
func TestDampingConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  DampingConfig
		want string
	}{
		{DampingConfig{Reuse: 3000}, "reuse < suppress"},
		{DampingConfig{Suppress: 500}, "reuse < suppress"},
		{DampingConfig{Reuse: -1}, "reuse < suppress"},
		{DampingConfig{Penalty: -5}, "penalty"},
		{DampingConfig{Penalty: math.NaN()}, "penalty"},
		{DampingConfig{Suppress: math.Inf(1)}, "suppress"},
		{DampingConfig{HalfLife: -sec}, "half-life"},
		{DampingConfig{HalfLife: sec, MaxSuppress: time.Hour}, "60 half-lives"},
	} {
		if _, err := NewDamper[string](c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one saying %q", c.cfg, err, c.want)
		}
	}
}

// TestDampingOutageCountsOnce: the same outage reported twice (two
// contexts of one device each read its PORT_ERR) is one flap; the next
// down after Up is another.
func TestDampingOutageCountsOnce(t *testing.T) {
	d := newDamper(t, DampingConfig{})
	d.Down("p", 0)
	if d.Down("p", 0) || d.State("p", 0).Flaps != 1 {
		t.Fatalf("a second report of one outage counted: %+v", d.State("p", 0))
	}
	d.Up("p", sec)
	d.Down("p", sec)
	if st := d.State("p", sec); st.Flaps != 2 || !st.Down {
		t.Fatalf("the next outage: %+v", st)
	}
	if st := d.State("p", time.Hour); st.Flaps != 2 || !st.Down {
		t.Fatalf("a port still down was forgotten: %+v", st)
	}
	d.Up("p", time.Hour)
	if st := d.State("p", time.Hour); st.Flaps != 0 {
		t.Fatalf("not forgotten once up, its penalty long gone: %+v", st)
	}
}

// TestDampingOff: with damping off nothing is recorded or suppressed.
func TestDampingOff(t *testing.T) {
	d := newDamper(t, DampingConfig{Off: true})
	for range 10 {
		if flap(d, "p", 0) {
			t.Fatal("suppressed with damping off")
		}
	}
	if st := d.States(0, cmp.Compare[string]); len(st) != 0 {
		t.Fatalf("states with damping off: %+v", st)
	}
}

// TestParseDamping: the settings the shim and ibpathd read; a bad one is
// refused with what is wrong, and String reads back.
func TestParseDamping(t *testing.T) {
	for _, c := range []struct {
		in   string
		want DampingConfig
	}{
		{"", DefaultDamping},
		{"on", DefaultDamping},
		{" OFF ", DampingConfig{Off: true, Penalty: 1000, Suppress: 1500, Reuse: 750, HalfLife: 30 * sec, MaxSuppress: 300 * sec}},
		{"half-life=10s,suppress=2000", DampingConfig{Penalty: 1000, Suppress: 2000, Reuse: 750, HalfLife: 10 * sec, MaxSuppress: 300 * sec}},
		{"penalty=500, reuse=400, max-suppress=2m", DampingConfig{Penalty: 500, Suppress: 1500, Reuse: 400, HalfLife: 30 * sec, MaxSuppress: 2 * time.Minute}},
	} {
		got, err := ParseDamping(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDamping(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		back, err := ParseDamping(got.String())
		if err != nil || back != got {
			t.Errorf("ParseDamping(%q) = %+v, %v; want %+v", got.String(), back, err, got)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"half-life", "not name=value"},
		{"half-life=", "not name=value"},
		{"half-life=-3s", "positive duration"},
		{"half-life=3", "positive duration"},
		{"suppress=lots", "positive number"},
		{"suppress=NaN", "positive number"},
		{"reuse=0", "positive number"},
		{"reuse=1600", "reuse < suppress"},
		{"decay=3s", "unknown setting"},
		{"reuse=100,reuse=200", "given twice"},
		{"half-life=1s,max-suppress=2m", "60 half-lives"},
	} {
		if _, err := ParseDamping(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseDamping(%q): error %v, want one saying %q", c.in, err, c.want)
		}
	}
}
