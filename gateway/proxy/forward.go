package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// The forwarding path: Dwara's own HTTP/1.1 client to the endpoints, the
// one client of every front, over plain TCP or TLS (pool.go). A request is
// written straight onto a pooled persistent connection (request line,
// headers without the hop-by-hop ones, the X-Forwarded-* set, the body
// streamed as it arrives), the response header is read under the
// upstream's response-header timeout, and the body is streamed back to the
// client, flushed as it comes when its length is unknown or it is an event
// stream. No goroutine is started per request or per connection.
//
// An upgrade request (websockets) goes the same way, with Connection:
// Upgrade and its Upgrade field, and is not retried; a 101 answer
// switching to the protocol asked for is relayed on the client's
// connection, hijacked, as a tunnel (upgrade.go).

// StatusClientGone is the status counted for a request whose client went
// away before it had the whole answer (nginx's 499).
const StatusClientGone = 499

// aLongTimeAgo is a deadline in the past: setting it unblocks any pending
// read or write on a connection at once.
var aLongTimeAgo = time.Unix(1, 0)

// ErrUpstreamTimeout marks a response header that did not arrive within the
// upstream's response-header timeout, or a connect that did not finish
// within the connect timeout.
var ErrUpstreamTimeout = errors.New("upstream timeout")

// Exchange is the outcome of sending one request upstream.
type Exchange struct {
	Conn   *Conn // its answer's head is conn.head
	reused bool
	// sent is true once any byte of the request body was read from the
	// client: from then on the request cannot be sent again.
	sent bool
	// written is true once any byte of the request was written to the
	// connection: from then on it may have reached the endpoint.
	written bool
}

// sendFunc writes a request on c, a connection to ep, and reads the answer
// header (each front parses answers its own way); sent reports whether any
// of the request body was read from the client. A failure to read the
// client's body must come as a clientBodyError, a response-header timeout
// as ErrUpstreamTimeout, and nothing at all from the endpoint as a
// StaleError (transmit does all three).
type sendFunc func(c *Conn, ep *Endpoint, tg *Target) (sent bool, err error)

// ExchangeRetrying is the seam both fronts forward through: it sends a
// request with send over the connection pools of the endpoints of
// a.Target's upstream, starting with a.Endpoint, until an answer header
// arrives. A request that fails before any answer header is retried on
// another endpoint of that upstream when the retry rules allow it
// (retry.go); one that every endpoint of the upstream that is up refused
// (no connection made) goes to the next target of the split (failover).
// a.Endpoint is then the endpoint that answered, or the last one tried,
// and a.Target its target. Every transport failure is reported to the
// passive checks (passive.go); the caller reports the answer (Answered)
// and owns x.Conn on success. A failure while ctx is done is returned at
// once.
//
// For a target whose service has a response cache, the answer may come
// from memory instead (cache.go): x.Conn is then a connection of memory.
func (p *Proxy) ExchangeRetrying(ctx context.Context, a *Attempt, req *Request, send sendFunc) (Exchange, error) {
	if a.Target.cache != nil {
		return p.cachedExchange(ctx, a, req, send)
	}
	return p.exchangeRetrying(ctx, a, req, send)
}

// exchangeRetrying is ExchangeRetrying without the cache.
func (p *Proxy) exchangeRetrying(ctx context.Context, a *Attempt, req *Request, send sendFunc) (Exchange, error) {
	var sentAt time.Time // an alias request's, for its time to first token
	if a.Target.model != nil {
		sentAt = time.Now()
	}
	x, err := p.roundTrip(ctx, a.Endpoint, a.Target, send, req.replayable())
	for err != nil {
		if ctx.Err() != nil {
			return x, err
		}
		u := a.Target.Up
		if x.endpointFault(err) {
			p.transportFailed(u, a.Endpoint, err)
		}
		if !connectFailed(x, err) {
			a.reached = true
		}
		failed := a.Endpoint
		if next := p.retryTarget(req, u, a, x, err); next != nil {
			p.log.Warn("upstream request failed; retrying on another endpoint",
				"request_id", req.RequestID, "service", req.Service,
				"upstream", u.name, "endpoint", failed.Addr, "next", next.Addr, "err", err)
			a.moveTo(next)
		} else if next = p.failover(req, a); next != nil {
			p.log.Warn("no endpoint of the upstream took the connection; failing over to the next target",
				"request_id", req.RequestID, "service", req.Service,
				"upstream", u.name, "endpoint", failed.Addr, "next_upstream", a.Target.Up.name, "next", next.Addr, "err", err)
		} else {
			return x, err
		}
		x, err = p.roundTrip(ctx, a.Endpoint, a.Target, send, req.replayable())
	}
	if m := a.Target.model; m != nil {
		x.Conn.tapAnswer(m, a.Target.rec, sentAt)
	}
	return x, nil
}

// roundTrip sends a request with send on a pooled connection of ep, of
// target tg. A
// pooled connection that turns out dead before any byte of an answer (the
// endpoint closed it while idle, and the look at it when it was taken did
// not see it yet) is replaced once by a newly dialled one (not another
// pooled one, which may be as dead) when the request cannot have reached
// the endpoint (nothing of it was written, and nothing of its body read),
// or when replay (a safe method without a body) allows sending it twice.
//
// On failure the exchange says what happened: no connection (the connect
// failed), whether the connection was a pooled one, whether any of the
// request was written and whether the body was touched, which is what
// endpointFault and mayHaveArrived judge.
func (p *Proxy) roundTrip(ctx context.Context, ep *Endpoint, tg *Target, send sendFunc, replay bool) (Exchange, error) {
	for attempt := 0; ; attempt++ {
		var (
			c      *Conn
			reused bool
			err    error
		)
		if attempt == 0 {
			c, reused, err = ep.Pool.get(ctx)
		} else {
			c, err = ep.Pool.dial(ctx)
		}
		if err != nil {
			return Exchange{}, dialError(err)
		}
		x := Exchange{Conn: c, reused: reused}
		before := c.written
		x.sent, err = send(c, ep, tg)
		x.written = c.written > before
		if err == nil {
			return x, nil
		}
		c.Net.Close()
		if attempt == 0 && x.staleAgain(err, replay) && ctx.Err() == nil {
			continue
		}
		return x, err
	}
}

// staleAgain reports whether the failed exchange x, on a pooled
// connection the endpoint had closed (no byte of an answer), may be sent
// again on a new connection: nothing of its body was read, and nothing of
// it was written or replay allows it.
func (x Exchange) staleAgain(err error, replay bool) bool {
	return x.reused && !x.sent && (!x.written || replay) && staleConn(err)
}

// endpointFault reports whether err, the failure of exchange x, counts
// against the endpoint for the passive checks: a refused or timed-out
// connect, a response-header timeout, a reset or an end of the connection
// before the answer header on a new connection, a malformed answer. A
// pooled connection the endpoint closed while it was idle does not count
// (closing idle connections is what endpoints do), nor does a failure to
// read the client's request body. The caller has ruled out the client
// going away.
func (x Exchange) endpointFault(err error) bool {
	if _, ok := errors.AsType[clientBodyError](err); ok {
		return false
	}
	if errors.Is(err, ErrUpstreamTimeout) || x.Conn == nil {
		return true
	}
	return !(x.reused && staleConn(err))
}

// mayHaveArrived reports whether the request of the failed exchange x may
// have reached the endpoint: any byte of it was written to a connection
// (whatever came back: a written request that meets a closed connection
// may have been read before the close). Such a request is retried only
// when it is safe to send twice (retry.go).
func (x Exchange) mayHaveArrived() bool {
	return x.Conn != nil && (x.written || x.sent)
}

// Transmit sends a request whose head the caller has written to c.bw: the
// body from body (none when nil), then flushes and waits, under ep's
// response-header timeout, for the first byte of an answer. Nothing at all
// from the endpoint is a StaleError (from a pooled connection: one the
// endpoint closed while it was idle, so the request never reached it),
// the timeout ErrUpstreamTimeout. sent reports whether the body was
// touched. On success the read deadline is still set: the caller reads the
// answer header under it (ReadAnswer), then calls HeadRead.
func (p *Proxy) Transmit(c *Conn, ep *Endpoint, body io.Reader, length int64, trailer func(*bufio.Writer)) (sent bool, err error) {
	if sent, err = p.SendBody(c, body, length, trailer); err != nil {
		return sent, err
	}
	// Always set: a pooled connection may keep the deadline of its last
	// answer (fastSend leaves it when the body was buffered).
	now := time.Now()
	var end time.Time
	if d := ep.Pool.ResponseHeaderTimeout(); d > 0 {
		end = now.Add(d)
	}
	c.SetAnswerDeadline(now, end)
	if err := c.FlushForAnswer(); err != nil {
		return sent, err
	}
	if _, err := c.Reader.Peek(1); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return sent, ErrUpstreamTimeout
		}
		return sent, StaleError{err}
	}
	return sent, nil
}

// SendBody sends the body of a request whose head the caller has written
// to c.bw, from body (none when nil); what is left in c.bw is flushed by
// the caller (FlushForAnswer), once it has set the answer's read
// deadline. sent reports whether the body was touched.
func (p *Proxy) SendBody(c *Conn, body io.Reader, length int64, trailer func(*bufio.Writer)) (sent bool, err error) {
	if body == nil {
		return false, nil
	}
	return true, p.writeBody(c, body, length, trailer)
}

// writeBody streams a request body on c: as is when length is above 0
// (by splice where r can, spliceBody), else (-1, an unknown length)
// chunked, ended by trailer, which writes the trailer fields and the
// final empty line. A failure to read the client's body is a
// clientBodyError.
func (p *Proxy) writeBody(c *Conn, r io.Reader, length int64, trailer func(*bufio.Writer)) error {
	if bs, ok := r.(BodySplicer); ok && length >= spliceBodyMin {
		buf := spliceBuffers.Get().(*[spliceBatch]byte)
		defer spliceBuffers.Put(buf)
		return spliceBody(c, bs, buf[:], length)
	}
	buf := p.buffers.Get()
	defer p.buffers.Put(buf)
	bw := c.Writer
	// The reader lives in the connection, so taking its address does not
	// allocate.
	c.body = clientBody{r: r, left: length}
	defer func() { c.body = clientBody{} }()
	body := &c.body
	if length > 0 {
		n, err := io.CopyBuffer(bw, body, buf)
		if err == nil && n < length {
			err = clientBodyError{io.ErrUnexpectedEOF}
		}
		return body.blame(err)
	}
	if _, err := io.CopyBuffer(chunkWriter{bw}, body, buf); err != nil {
		return body.blame(err)
	}
	bw.WriteString("0\r\n") // errors surface at Flush
	trailer(bw)             // errors surface at Flush
	return nil
}

// spliceBody is writeBody for a body of known length that can splice:
// each piece it reads into buf is written to c.Writer, each it spliced
// went to c already. A failure of c's side of a splice is the endpoint's,
// any other the client's (clientBodyError).
func spliceBody(c *Conn, bs BodySplicer, buf []byte, length int64) error {
	for left := length; left > 0; {
		p := buf[:min(int64(len(buf)), left)]
		n, spliced, err := bs.ReadOrSplice(p, c)
		left -= int64(n)
		if n > 0 && !spliced {
			if _, werr := c.Writer.Write(p[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil:
		case errors.As(err, new(endpointSide)):
			return err
		case err == io.EOF && left == 0:
			return nil
		case err == io.EOF:
			return clientBodyError{io.ErrUnexpectedEOF}
		default:
			return clientBodyError{err}
		}
	}
	return nil
}

// clientBody reads a client's request body for writeBody, at most left
// bytes (no limit when left is -1, an unknown length), and remembers
// whether reading failed, so that the client's failure is not taken for
// the endpoint's.
type clientBody struct {
	r      io.Reader
	left   int64
	failed bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	if err != nil && err != io.EOF {
		b.failed = true
	}
	return n, err
}

// blame returns err as a clientBodyError when reading the client's body
// failed.
func (b *clientBody) blame(err error) error {
	if err != nil && b.failed {
		return clientBodyError{err}
	}
	return err
}

// clientBodyError is a failure to read the client's request body.
type clientBodyError struct{ err error }

func (e clientBodyError) Error() string { return "read request body: " + e.err.Error() }
func (e clientBodyError) Unwrap() error { return e.err }

// dialError marks a connect timeout as ErrUpstreamTimeout.
func dialError(err error) error {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return errors.Join(ErrUpstreamTimeout, err)
	}
	return err
}

// StaleError is a connection that ended before the first byte of an
// answer.
type StaleError struct{ Err error }

// Error says that the connection ended before any answer, and why.
func (e StaleError) Error() string { return "connection closed before any answer: " + e.Err.Error() }

// Unwrap returns the error the connection ended with.
func (e StaleError) Unwrap() error { return e.Err }

// staleConn reports whether err is what a pooled connection that the
// endpoint closed while it was idle gives: no byte of an answer (end of
// file or a reset), or a broken pipe while writing the request.
func staleConn(err error) bool {
	if _, ok := errors.AsType[StaleError](err); ok {
		return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
	}
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}
