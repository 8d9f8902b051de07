package pathsel

import (
	"errors"
	"slices"
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

func TestChooseBackup(t *testing.T) {
	rails := func(states ...verbs.PortState) []HCA {
		var hs []HCA
		for i, s := range states {
			hs = append(hs, HCA{Name: string(rune('a' + i)), Ports: []Port{{Num: 1, State: s}}})
		}
		return hs
	}
	cases := []struct {
		hcas []HCA
		def  int
		want int
		err  error
	}{
		{rails(up, up, up, up), 0, 1, nil},
		{rails(up, up, up, up), 3, 0, nil},   // wraps around
		{rails(up, down, up, up), 0, 2, nil}, // skips a rail without an active port
		{rails(up, down, down, down), 0, 0, ErrNoBackup},
		{rails(up), 0, 0, ErrNoBackup},
	}
	for i, c := range cases {
		got, err := ChooseBackup(c.hcas, c.def)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("case %d: err %v, want %v", i, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("case %d: backup %d, %v; want %d", i, got, err, c.want)
		}
	}
	if _, err := ChooseBackup(rails(up, up), 5); err == nil {
		t.Error("out-of-range default accepted")
	}
	for _, c := range []struct {
		n, def int
		want   []int
	}{{4, 0, []int{1, 2, 3}}, {4, 2, []int{3, 0, 1}}, {1, 0, []int{}}, {3, -1, []int{0, 1, 2}}, {3, 3, []int{0, 1, 2}}} {
		if got := BackupOrder(c.n, c.def); !slices.Equal(got, c.want) {
			t.Errorf("BackupOrder(%d, %d) = %v, want %v", c.n, c.def, got, c.want)
		}
	}
	// Both ends of a rail-0 connection pick the same rail.
	a, _ := ChooseBackup(rails(up, down, up), 0)
	b, _ := ChooseBackup(rails(up, down, up), 0)
	if a != b || a != 2 {
		t.Errorf("ends chose rails %d and %d", a, b)
	}
}
