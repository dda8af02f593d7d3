package proxy

import (
	"errors"
	"net"
	"sync"
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

// A request body of known length can go the other way in the same
// manner: the fasthttp front's body (a BodySplicer) reads the bytes its
// server holds already into the copy buffer, and once the next bytes are
// to come from the client's socket, moves them from there to the
// endpoint's with SpliceBodyFrom instead (writeBody).

// BodySplicer is a request body that can move the bytes it would read
// from the client's socket straight to an endpoint connection's:
// ReadOrSplice reads into p as Read does, or moves up to len(p) bytes
// to c by c.SpliceBodyFrom (p untouched), and reports which (spliced).
// An error of c's side of a splice is one SpliceBodyFrom returned: the
// caller tells it from the client's own failures (endpointSide).
type BodySplicer interface {
	ReadOrSplice(p []byte, c *Conn) (n int, spliced bool, err error)
}

// spliceBatch bounds the bytes one fill of the pipe takes from the
// source socket, and the pipe's size is asked to match it: a 256 KiB
// answer moves in one fill and one drain when the socket holds it all.
const spliceBatch = 256 << 10

// spliceBuffers are the buffers of spliceBody: one batch of a splice
// (spliceBatch), so that a body moves in batches as large as the pipe
// takes, which is what lets the endpoint read it in long runs rather than
// waking for every copy buffer's worth. Their memory is touched only by
// the bytes a front reads rather than splices (those it holds already, a
// body on a socket that cannot splice).
var spliceBuffers = sync.Pool{New: func() any { return new([spliceBatch]byte) }}

// spliceBodyMin is the least body length writeBody moves by splice:
// one copy buffer. A smaller body mostly comes with its head, in the
// front's buffer.
const spliceBodyMin = ConnBufferSize

// SpliceBodyFrom moves up to n bytes of a request body from src's socket
// (srcConn's, the client's) to c's, after what c.Writer holds of the
// request (written first): what src has, once it has some, as a read
// returns (so that a body read under a stall timeout moves the deadline
// as often as reads would). It returns the bytes that reached c; an error
// of c's side (the write) comes as an endpointSide, one of src's side
// (the read, or the body ending short: io.ErrUnexpectedEOF) as it is,
// ErrNoSplice, with nothing moved, when either socket cannot splice.
func (c *Conn) SpliceBodyFrom(src *Socket, srcConn net.Conn, n int64) (int64, error) {
	if err := c.Writer.Flush(); err != nil {
		return 0, endpointSide{err}
	}
	moved, srcSide, err := c.sock.SpliceSome(c.Net, src, srcConn, n)
	c.written += moved
	if err != nil && !srcSide && err != ErrNoSplice {
		err = endpointSide{err}
	}
	return moved, err
}

// endpointSide is a failure to write a request body to the endpoint
// that came back through the client's body reader (SpliceBodyFrom).
type endpointSide struct{ err error }

func (e endpointSide) Error() string { return e.err.Error() }
func (e endpointSide) Unwrap() error { return e.err }
