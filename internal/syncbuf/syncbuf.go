// Package syncbuf holds Buffer, a bytes.Buffer that goroutines may write
// and read at once: the tests collect a process's output or a logger's
// lines in it while the code under test still writes.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is an append-only text buffer safe for concurrent use. The zero
// value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
