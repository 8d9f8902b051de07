package ownerproto

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Conn reads and writes protocol messages on a connection. Writes are
// serialised; reads must come from one goroutine.
type Conn struct {
	c  net.Conn
	r  *bufio.Reader
	mu sync.Mutex
}

// NewConn wraps c. r, when not nil, is a reader already buffering c (what
// an HTTP upgrade leaves behind).
func NewConn(c net.Conn, r *bufio.Reader) *Conn {
	if r == nil {
		r = bufio.NewReaderSize(c, 4096)
	}
	return &Conn{c: c, r: r}
}

// Send writes one message.
func (c *Conn) Send(m Msg) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.c.Write(b); err != nil {
		return fmt.Errorf("ownerproto: send %s: %w", m.Type, err)
	}
	return nil
}

// Recv reads one message. It returns io.EOF when the peer closed the
// connection cleanly between messages.
func (c *Conn) Recv() (Msg, error) {
	var line []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLine {
			return Msg{}, fmt.Errorf("%w: line exceeds %d bytes", ErrBadMessage, MaxLine)
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return Msg{}, io.EOF
		}
		return Msg{}, fmt.Errorf("ownerproto: receive: %w", err)
	}
	return Decode(line)
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }
