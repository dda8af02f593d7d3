package proxy

import (
	"errors"
	"net"
	"sync/atomic"
)

// An answer's body of known length can go from the endpoint's socket to
// the client's without passing through this process: the fasthttp front
// asks for it (fastfront's spliceBody) once the client's answer head is
// out. The bytes the endpoint connection's buffer holds already are
// written from there; the rest moves by splice(2) through a pipe
// (splice_linux.go), in batches, so the kernel hands the pages on
// instead of copying them up into a buffer and down again. Elsewhere than
// Linux, and for a TLS connection on either side, Socket.SpliceFrom says
// ErrNoSplice and the front copies as before.

// ErrNoSplice is Socket.SpliceFrom's answer when the bytes cannot move
// by splice: a socket that is not a plain TCP one, no pipe to be had, or
// not Linux. Nothing was moved.
var ErrNoSplice = errors.New("splice not possible here")

// splicedBytes counts the bytes this process moved by splice, for the
// tests that check a path takes it.
var splicedBytes atomic.Int64

// AnswerDirect reports whether the body of c's last answer can be read
// with ReadAnswerDirect and moved with SpliceAnswer: a body of known
// length, some of it still to come, read as it is (not tapped for a model
// alias, not copied into the response cache, not from memory).
func (c *Conn) AnswerDirect() bool {
	b := &c.answer
	return b.framing == BodyLength && b.left > 0 && !b.inMemory && b.fill == nil &&
		(c.tap == nil || c.tap.m == nil)
}

// ReadAnswerDirect reads the body of c's last answer into p, as its
// AnswerStream does, for a body AnswerDirect allows; but once c.Reader
// holds none of it, it reads from the connection straight into p, so the
// bytes do not stop in c.Reader on their way to another buffer.
func (c *Conn) ReadAnswerDirect(p []byte) (int, error) {
	b := &c.answer
	if c.Reader.Buffered() > 0 || b.framing != BodyLength {
		return b.Read(p)
	}
	return b.readLength(c, p)
}

// SpliceAnswer moves up to n more bytes of the body of c's last answer
// (AnswerDirect) to dst, whose socket ds is: first those c.Reader holds,
// written from there, then the rest from c's socket by splice
// (Socket.SpliceFrom, which runs before ahead of each batch it writes).
// It returns the bytes that reached dst, and reports whether an error
// is the endpoint's side (a failed read, or the body cut short:
// io.ErrUnexpectedEOF) rather than dst's. ErrNoSplice, with what was
// written from c.Reader, means the rest is to be copied.
func (c *Conn) SpliceAnswer(ds *Socket, dst net.Conn, n int64, before func()) (moved int64, endpoint bool, err error) {
	b := &c.answer
	n = min(n, b.left)
	if k := int64(c.Reader.Buffered()); k > 0 && n > 0 {
		held, _ := c.Reader.Peek(int(min(k, n)))
		w, err := ds.Write(dst, held)
		_, _ = c.Reader.Discard(w)
		b.left -= int64(w)
		moved += int64(w)
		if err != nil {
			return moved, false, err
		}
	}
	if moved == n {
		return moved, false, nil
	}
	m, endpoint, err := ds.SpliceFrom(dst, &c.sock, c.Net, n-moved, before)
	b.left -= m
	return moved + m, endpoint, err
}
