package proxy

import (
	"io"
	"time"
)

// Deadliner is what the standard library's response writer offers for
// per-request deadlines on the client connection.
type Deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// StallBody reads a client's request body with a read deadline that moves
// forward before every read: a body that makes no progress for stall ends
// with a timeout, one that keeps coming is never cut. dl is the net/http
// front's response writer, or the fasthttp front's request (which puts
// its own deadline back after the request).
type StallBody struct {
	R     io.Reader
	DL    Deadliner
	Stall time.Duration
}

// Read moves the read deadline stall ahead, then reads from R.
func (b *StallBody) Read(p []byte) (int, error) {
	_ = b.DL.SetReadDeadline(time.Now().Add(b.Stall))
	return b.R.Read(p)
}

// Close closes the body read, when it can be closed.
func (b *StallBody) Close() error {
	if c, ok := b.R.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
