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
// forward as it reads: a body that makes no progress for stall ends with a
// timeout, one that keeps coming is never cut. dl is the net/http front's
// response writer, or the fasthttp front's request (which puts its own
// deadline back after the request).
//
// The deadline moves only when a read finds less than stall left before
// it, and then to stall and a sixteenth ahead: a body read in many pieces
// moves it about sixteen times a stall, not at every read (each move
// modifies a runtime timer), and a silence is cut at most a sixteenth of
// stall later than stall.
type StallBody struct {
	R     io.Reader
	DL    Deadliner
	Stall time.Duration
	// by is the deadline set (zero: none yet).
	by time.Time
}

// Read moves the read deadline ahead when it comes within stall, then
// reads from R.
func (b *StallBody) Read(p []byte) (int, error) {
	now := time.Now()
	if b.by.IsZero() || b.by.Sub(now) < b.Stall {
		b.by = now.Add(b.Stall + b.Stall/16)
		_ = b.DL.SetReadDeadline(b.by)
	}
	return b.R.Read(p)
}

// Close closes the body read, when it can be closed.
func (b *StallBody) Close() error {
	if c, ok := b.R.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
