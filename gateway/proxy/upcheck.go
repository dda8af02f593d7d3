package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"log/slog"
	"sync/atomic"
)

// Endpoint protocol errors: what an endpoint sends outside the frame of
// an answer. A connection to an endpoint is reused only when it is
// provably clean: its last answer was read to the end of its frame
// (Content-Length, the last chunk and its trailer, no body for HEAD, 1xx,
// 204 and 304) with nothing buffered past it (connPool.put), and nothing
// has arrived on it while it was idle (connPool.takeIdle). Anything else closes the connection and is counted in
// dwara_upstream_protocol_errors_total{upstream,reason}, and logged once
// per endpoint and reason: a later request must never read another
// exchange's bytes as its answer.

// protocolReason is why an endpoint connection was closed for what its
// endpoint sent.
type protocolReason int

const (
	// reasonExtraBytes: bytes past the end of an answer (a HEAD, 204 or
	// 304 answered with a body, more than the Content-Length, bytes after
	// the last chunk).
	reasonExtraBytes protocolReason = iota
	// reasonUnsolicited: bytes on an idle connection, which no request
	// asked for.
	reasonUnsolicited
	// reasonHeadTooLarge: an answer head over 16 KiB.
	reasonHeadTooLarge
	numReasons
)

var reasonNames = [numReasons]string{"extra_bytes", "unsolicited", "head_too_large"}

// MaxAnswerHead bounds an answer head (status line and fields), and a
// trailer section, from an endpoint: they are parsed in the connection's
// read buffer, which holds more (ConnBufferSize).
const MaxAnswerHead = 16 << 10

// errAnswerHeadTooLarge is an answer head over MaxAnswerHead: a 502,
// counted head_too_large.
var errAnswerHeadTooLarge = errors.New("upstream answer head over 16 KiB")

// protocolWatch counts and logs the protocol errors of one endpoint of
// one upstream (a connPool's). Nil counts nothing. Safe for concurrent
// use.
type protocolWatch struct {
	upstream, endpoint string
	// counters are the upstream's, shared by the watches of all its
	// endpoints (upstreamShared.protocol): the series are labelled by
	// upstream and reason only.
	counters *protocolCounters
	logged   atomic.Uint32 // bit r: reason r was logged
	log      *slog.Logger
}

// protocolCounters are the dwara_upstream_protocol_errors_total children
// of one upstream, by reason.
type protocolCounters [numReasons]lazyCounter

// report counts one protocol error of reason r, and logs the first of
// each reason.
func (w *protocolWatch) report(r protocolReason) {
	if w == nil {
		return
	}
	w.counters[r].Inc()
	if w.logged.Or(1<<r)&(1<<r) == 0 && w.log != nil {
		w.log.Warn("endpoint sent bytes outside an answer's frame; its connection was closed (logged once per endpoint and reason)",
			"upstream", w.upstream, "endpoint", w.endpoint, "reason", reasonNames[r])
	}
}

// idleState is what an idle endpoint connection holds.
type idleState int

const (
	idleClean  idleState = iota // nothing: it may carry a request
	idleClosed                  // the endpoint closed or reset it
	idleData                    // bytes no request asked for
)

// idleState looks at c, idle, without reading it (idle_unix.go): a
// connection with bytes or an end of file waiting on its socket is not to
// be used. An idle one has no buffer to hold bytes (Put refused those with
// any, and detached the others').
func (c *Conn) idleState() idleState {
	st, cleared := c.peeker.state(c.Net)
	if cleared {
		c.rdl = 0
	}
	return st
}

// AnswerHeadEnd returns the length of the answer head at the start of b,
// through the empty line that ends it, or -1 when b does not hold all of
// it. A line may end in a bare LF (RFC 9112 section 2.2).
func AnswerHeadEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		switch {
		case i < len(b) && b[i] == '\n':
			return i + 1
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			return i + 2
		}
	}
}

// bufferAnswerHead reads from br until it holds a whole answer head, and
// returns its length: errAnswerHeadTooLarge (counted in w) when the head
// is over MaxAnswerHead (or br's buffer), or the read's error. Reads
// happen under the connection's read deadline.
func bufferAnswerHead(br *bufio.Reader, w *protocolWatch) (int, error) {
	n, full, err := bufferUntil(br, AnswerHeadEnd, MaxAnswerHead)
	if full {
		w.report(reasonHeadTooLarge)
		return 0, errAnswerHeadTooLarge
	}
	return n, err
}

// bufferUntil reads from br until end finds, in what br holds, the end of
// a section at its start, and returns the section's length; full reports
// that max bytes (or br's buffer) came without it, err a read's error.
func bufferUntil(br *bufio.Reader, end func([]byte) int, max int) (n int, full bool, err error) {
	max = min(max, br.Size())
	for {
		b, _ := br.Peek(br.Buffered())
		if n := end(b); n >= 0 && n <= max {
			return n, false, nil
		}
		if len(b) >= max {
			return 0, true, nil
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			return 0, false, err
		}
	}
}
