package ownerproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// SendTimeout bounds a write: a peer that does not read gets its
// connection closed rather than holding the writer (and whoever waits to
// write after it) for good.
const SendTimeout = 10 * time.Second

// Conn reads and writes protocol messages on a connection. Writes are
// serialised; reads must come from one goroutine.
type Conn struct {
	c     net.Conn
	r     *bufio.Reader
	write chan struct{} // held by the writer (a lock a context can give up on)
}

// NewConn wraps c. r, when not nil, is a reader already buffering c (what
// an HTTP upgrade leaves behind).
func NewConn(c net.Conn, r *bufio.Reader) *Conn {
	if r == nil {
		r = bufio.NewReaderSize(c, 4096)
	}
	return &Conn{c: c, r: r, write: make(chan struct{}, 1)}
}

// Send writes one message, within SendTimeout.
func (c *Conn) Send(m Msg) error { return c.SendContext(context.Background(), m) }

// SendContext writes one message, giving up when ctx ends (waiting for
// another writer, or writing) or SendTimeout has passed. A write that
// did not finish leaves the stream cut in the middle of a message: the
// connection is closed.
func (c *Conn) SendContext(ctx context.Context, m Msg) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	select {
	case c.write <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("ownerproto: send %s: waiting for the connection: %w", m.Type, ctx.Err())
	}
	defer func() { <-c.write }()
	deadline := time.Now().Add(SendTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.c.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("ownerproto: send %s: set the write deadline: %w", m.Type, err)
	}
	if _, err := c.c.Write(b); err != nil {
		c.c.Close()
		return fmt.Errorf("ownerproto: send %s: %w", m.Type, err)
	}
	return nil
}

// SetReadDeadline bounds the reads until t (the zero time: no bound).
func (c *Conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

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
