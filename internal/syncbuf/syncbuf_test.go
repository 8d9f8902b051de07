package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Writers and a reader at once (run with -race): nothing is lost and no
// write is torn.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	const writers, lines = 4, 200
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			line := strings.Repeat(string(rune('a'+w)), 16) + "\n"
			for range lines {
				if n, err := b.Write([]byte(line)); n != len(line) || err != nil {
					t.Errorf("Write = %d, %v", n, err)
				}
			}
		}()
	}
	for range 50 {
		_ = b.String()
	}
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines, want %d", len(got), writers*lines)
	}
	for _, l := range got {
		if len(l) != 16 || strings.Count(l, l[:1]) != 16 {
			t.Fatalf("torn line %q", l)
		}
	}
}
