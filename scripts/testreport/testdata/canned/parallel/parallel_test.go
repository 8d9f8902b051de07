package parallel

import (
	"testing"
	"time"
)

func TestPar(t *testing.T) {
	for _, c := range []struct {
		name string
		wait time.Duration
		fail bool
	}{{"slow", 20 * time.Millisecond, true}, {"fast", 0, false}, {"mid", 10 * time.Millisecond, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			t.Logf("%s starts", c.name)
			time.Sleep(c.wait)
			if c.fail {
				t.Errorf("%s failed", c.name)
			}
		})
	}
}
