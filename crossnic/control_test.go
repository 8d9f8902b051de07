package crossnic

import "testing"

func TestControlEncoding(t *testing.T) {
	// counters at or ahead of what the receiver knows (the base), and
	// behind it (a peer that lost a completion when its HCA died)
	for _, c := range []struct{ counter, base uint64 }{{0, 0}, {5, 3}, {1 << 30, 1<<30 - 4}, {3<<30 + 17, 3 << 30}, {1<<40 + 9, 1<<40 - 100},
		{1<<29 - 1, 0}, {0, 5}, {1<<30 - 1, 1<<30 + 2}, {1<<30 - 1, 1 << 30}, {1 << 40, 1<<40 + 1<<29}, {7, 1<<29 + 7}} {
		for _, k := range []ctrlKind{ctrlNotify, ctrlAck, ctrlSwitch} {
			imm := encodeCtrl(k, c.counter)
			gk, got, err := decodeCtrl(imm, c.base)
			if err != nil || gk != k || got != c.counter {
				t.Errorf("counter %d base %d kind %d: decoded %d %d %v", c.counter, c.base, k, gk, got, err)
			}
			if IsRefusal(imm) {
				t.Errorf("kind %d counter %d: taken for a refusal", k, c.counter)
			}
		}
	}
	if k, _, err := decodeCtrl(encodeRefusal(), 12345); err != nil || k != ctrlRefuse || !IsRefusal(encodeRefusal()) {
		t.Errorf("refusal decoded as %d, %v", k, err)
	}
}

// TestControlAnnounce: an announcement carries any 24-bit PSN, decodes
// to it whatever the receiver's counters, and is never a refusal (the
// express lane's test in C, IsRefusal, does not fire on it).
func TestControlAnnounce(t *testing.T) {
	for _, psn := range []uint32{0, 1, 0x7fffff, 0x800000, 0xabcdef, 0xffffff} {
		imm := encodeAnnounce(psn)
		k, got, err := decodeCtrl(imm, 1<<30+5)
		if err != nil || k != ctrlAnnounce || got != uint64(psn) {
			t.Errorf("PSN %#x: immediate %#x decoded as %d %#x %v", psn, imm, k, got, err)
		}
		if IsRefusal(imm) {
			t.Errorf("PSN %#x: announcement %#x taken for a refusal", psn, imm)
		}
		if imm>>ctrlCounterBits != uint32(ctrlRefuse) {
			t.Errorf("PSN %#x: announcement %#x is not of kind 0", psn, imm)
		}
	}
	if encodeAnnounce(1<<24|5) != encodeAnnounce(5) {
		t.Error("an announcement's PSN is not cut to 24 bits")
	}
	// Kind 0 with reserved bits set is no message of ibpath's.
	for _, imm := range []uint32{1, 0x1fffffff, ctrlAnnounceBit | 1<<24, ctrlAnnounceBit | 1<<28} {
		if _, _, err := decodeCtrl(imm, 0); err == nil {
			t.Errorf("immediate %#x decoded without an error", imm)
		}
	}
}

// TestControlMessage: the names and values tools read from immediates.
func TestControlMessage(t *testing.T) {
	for _, c := range []struct {
		imm   uint32
		kind  string
		value uint32
	}{
		{encodeCtrl(ctrlNotify, 7), "notify", 7},
		{encodeCtrl(ctrlAck, 1<<30+5), "ack", 5},
		{encodeCtrl(ctrlSwitch, 3), "switch", 3},
		{encodeRefusal(), "refuse", 0},
		{encodeAnnounce(0xabcdef), "announce", 0xabcdef},
		{1<<28 | 1, "", 0}, // kind 0 with a reserved bit
	} {
		if k, v := ControlMessage(c.imm); k != c.kind || v != c.value {
			t.Errorf("%#x: %q %d, want %q %d", c.imm, k, v, c.kind, c.value)
		}
	}
}
