package crossnic

import "testing"

func TestControlEncoding(t *testing.T) {
	// counters at or ahead of what the receiver knows (the base), and
	// behind it (a peer that lost a completion when its HCA died)
	for _, c := range []struct{ counter, base uint64 }{{0, 0}, {5, 3}, {1 << 30, 1<<30 - 4}, {3<<30 + 17, 3 << 30}, {1<<40 + 9, 1<<40 - 100},
		{1<<29 - 1, 0}, {0, 5}, {1<<30 - 1, 1<<30 + 2}, {1<<30 - 1, 1 << 30}, {1 << 40, 1<<40 + 1<<29}, {7, 1<<29 + 7}} {
		for _, k := range []ctrlKind{ctrlRefuse, ctrlNotify, ctrlAck, ctrlSwitch} {
			gk, got, err := decodeCtrl(encodeCtrl(k, c.counter), c.base)
			if err != nil || gk != k || got != c.counter {
				t.Errorf("counter %d base %d kind %d: decoded %d %d %v", c.counter, c.base, k, gk, got, err)
			}
		}
	}
	if k, _, err := decodeCtrl(encodeCtrl(ctrlRefuse, 0), 0); err != nil || k != ctrlRefuse {
		t.Errorf("refusal decoded as %d, %v", k, err)
	}
}
