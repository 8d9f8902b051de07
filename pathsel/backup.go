package pathsel

import (
	"errors"
	"fmt"
)

// ErrNoBackup: no other healthy adapter on the host can back up this one.
var ErrNoBackup = errors.New("pathsel: no healthy backup HCA")

// Healthy reports whether an adapter has an ACTIVE port.
func (h HCA) Healthy() bool {
	for _, p := range h.Ports {
		if p.Active() {
			return true
		}
	}
	return false
}

// ChooseBackup picks the adapter that backs up hcas[def] on a host whose
// adapters are listed in rail order (HCA i on rail i). It is the next
// healthy rail after def, wrapping around: both ends of a connection on
// rail i apply the same rule, so with the same rails healthy they choose the
// same rail j and their backup QPs meet on one rail switch. A failed
// adapter or one without an ACTIVE port is never chosen.
func ChooseBackup(hcas []HCA, def int) (int, error) {
	if def < 0 || def >= len(hcas) {
		return 0, fmt.Errorf("pathsel: choose backup: default index %d out of %d adapters", def, len(hcas))
	}
	for _, j := range BackupOrder(len(hcas), def) {
		if hcas[j].Healthy() {
			return j, nil
		}
	}
	return 0, fmt.Errorf("%w for %s (%d adapters)", ErrNoBackup, hcas[def].Name, len(hcas))
}

// BackupOrder lists the other adapters of a host of n, in rail order, as
// candidates to back up adapter def: the next rail after def first,
// wrapping around (ChooseBackup's rule; the shim's choice weighs them in
// this order too). A def out of range lists all n in order.
func BackupOrder(n, def int) []int {
	if def < 0 || def >= n {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, 0, n-1)
	for k := 1; k < n; k++ {
		out = append(out, (def+k)%n)
	}
	return out
}
