// Package h2server is an HTTP/2 server (RFC 9113) for connections that
// negotiated h2 by ALPN, serving an http.Handler: the TLS front's
// alternative to Go's own (net/http) HTTP/2 server, built for a proxy's
// traffic.
//
// Go's server reads frames on one goroutine and hands each to a second,
// which owns the connection's state and schedules every frame written,
// writing the response HEADERS of each stream on a goroutine of its own;
// a handler's write is a message to it and a wait for its answer. Here
// the goroutine that reads the frames acts on each itself, under the
// connection's lock, and a stream's handler writes its frames itself,
// under the write lock: an answer whose body the handler wrote before
// returning (most of a proxy's) goes out as HEADERS and DATA in one
// locked write, flushed by the last writer waiting, so answers of several
// streams ready together leave in one TLS record. Frames are parsed and
// HPACK decoded by golang.org/x/net/http2's Framer.
//
// What it does not do: server push (SETTINGS_ENABLE_PUSH is ignored),
// stream priorities (PRIORITY is read and checked, never acted on), h2c
// (only connections a TLS front hands over) and extended CONNECT.
package h2server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Defaults of a Server's zero fields.
const (
	// DefaultMaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS: the
	// streams one connection may have open at once (Go's server's value).
	DefaultMaxConcurrentStreams = 250
	// DefaultMaxHeaderListSize bounds a request's header list (RFC 9113,
	// section 6.5.2: names, values and 32 bytes a field), as net/http's
	// default of 1 MiB does.
	DefaultMaxHeaderListSize = 1 << 20
	// streamWindow is each stream's receive window (SETTINGS_INITIAL_
	// WINDOW_SIZE), connWindow the connection's: how much of request
	// bodies one connection may make the server hold unread.
	streamWindow = 1 << 20
	connWindow   = 4 << 20
	// maxFrameSize is the largest frame read (SETTINGS_MAX_FRAME_SIZE),
	// the protocol's initial value: the framer's read buffer grows to the
	// largest frame read, so this bounds it.
	maxFrameSize = 16 << 10
	// writeBufferSize is the connection's write buffer: what the writers
	// of a flush gather into one TLS record's worth of writes.
	writeBufferSize = 16 << 10
	// handlerBuffer is the body a handler writes that is held until it
	// returns or writes more: an answer of up to this size goes out with
	// its HEADERS in one write, flagged as the end of the stream.
	handlerBuffer = 4 << 10
)

// clientPreface is what every HTTP/2 client sends first.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Server serves HTTP/2 connections with Handler. Set its fields before
// the first ServeConn; it is safe for concurrent use.
type Server struct {
	// Handler serves each request (each stream) on a goroutine of its own.
	// It keeps neither the request's Header nor the answer's past its
	// return: both maps are emptied then and serve a later stream.
	Handler http.Handler
	// MaxConcurrentStreams, MaxHeaderListSize: 0 means the default above.
	MaxConcurrentStreams uint32
	MaxHeaderListSize    uint32
	// ReadHeaderTimeout bounds the client's preface and first SETTINGS;
	// IdleTimeout a connection with no stream open (0: no bound).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// WriteTimeout bounds each write to the connection: a client that
	// takes nothing for it loses the connection (0: no bound).
	WriteTimeout time.Duration
	// Log gets the handler panics and the connection errors worth a line;
	// nil: slog.Default().
	Log *slog.Logger
	// ConnContext, when set, makes the context every request of a
	// connection derives from.
	ConnContext func(ctx context.Context, c net.Conn) context.Context

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutdown bool
	idle     chan struct{} // closed when conns empties during a shutdown

	workers workers
}

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams == 0 {
		return DefaultMaxConcurrentStreams
	}
	return s.MaxConcurrentStreams
}

func (s *Server) maxHeaderList() uint32 {
	if s.MaxHeaderListSize == 0 {
		return DefaultMaxHeaderListSize
	}
	return s.MaxHeaderListSize
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// ErrServerClosed is ServeConn's answer once Shutdown or Close began: the
// connection was closed without being served.
var ErrServerClosed = errors.New("h2server: server closed")

// ServeConn serves the HTTP/2 connection nc (a TLS connection that
// negotiated h2) until it ends, and closes it. It returns nil when the
// client or a shutdown ended it, else why it ended.
func (s *Server) ServeConn(nc net.Conn) error {
	c := newConn(s, nc)
	if !s.track(c, true) {
		_ = nc.Close()
		return ErrServerClosed
	}
	defer s.track(c, false)
	return c.serve()
}

// track adds c to the connections served (add), or removes it; it
// reports false, adding nothing, once the server is shutting down.
func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.shutdown {
			return false
		}
		if s.conns == nil {
			s.conns = make(map[*conn]struct{})
		}
		s.conns[c] = struct{}{}
		return true
	}
	delete(s.conns, c)
	if len(s.conns) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	return true
}

// Shutdown stops the server gracefully: every connection is told
// (GOAWAY) that no new stream will be served, and is closed once its open
// streams are over. Shutdown waits for that, or until ctx ends; then it
// closes the connections still open and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	var idle chan struct{}
	if len(s.conns) > 0 {
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle = s.idle
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway(http2.ErrCodeNo)
	}
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			_ = s.Close()
			return ctx.Err()
		}
	}
	s.workers.stop()
	return nil
}

// Close closes every connection at once, its streams cut.
func (s *Server) Close() error {
	s.mu.Lock()
	s.shutdown = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.nc.Close()
	}
	s.workers.stop()
	return nil
}

// conn is one HTTP/2 connection.
type conn struct {
	s    *Server
	nc   net.Conn
	tls  *tls.ConnectionState
	addr string
	// ctx is what each stream's context derives from: ConnContext's, or
	// the background. A stream's is cancelled by the stream's end (cut,
	// run), which the connection's end brings to each: no context of the
	// connection's own, whose list of children every stream would join
	// and leave.
	ctx context.Context

	br   *bufio.Reader
	rf   *http2.Framer // read by serve's goroutine only, as is hdec
	hdec *headerDecoder

	// wmu serializes the writes; under it: bw, wf, henc, hbuf, werr.
	wmu     sync.Mutex
	waiting atomic.Int32 // writers that have the lock or wait for it
	bw      *bufio.Writer
	wf      *http2.Framer
	henc    *hpack.Encoder
	hbuf    []byte
	werr    error
	lowered map[string]string // field names lowered (encode)

	// ctl holds the control frames (acknowledgements, window updates,
	// resets) written while another writer had the write lock, for the
	// writer that has it to write before it lets go (ctlMu guards it):
	// the goroutine that reads the frames never waits behind a write to a
	// client that reads slowly or not at all, and so goes on taking in
	// what the client sends (the client may be waiting for that to read
	// again).
	ctlMu sync.Mutex
	ctl   []func() error

	// mu guards the streams and the flow-control state; flow is signalled
	// when a send window grows or a stream ends.
	mu          sync.Mutex
	flow        sync.Cond
	streams     map[uint32]*stream
	maxID       uint32     // the highest client stream id seen
	open        int        // streams open (either half)
	running     int        // handlers running
	sendWindow  int64      // the connection's send window
	peerWindow  int64      // SETTINGS_INITIAL_WINDOW_SIZE of the client
	recvWindow  int64      // what is left of the connection's receive window
	recvUnacked int64      // bytes taken off the connection's receive window, not yet given back
	started     bool       // the server's SETTINGS are written
	goingAway   bool       // GOAWAY sent: no new stream
	closed      bool       // serve has ended
	refused     int        // streams refused in a row (rapid reset)
	emptyData   int        // empty DATA frames without END_STREAM in a row
	resets      [16]uint32 // the streams this side reset last, whose frames in flight are ignored
	resetAt     int

	peerFrame atomic.Uint32 // SETTINGS_MAX_FRAME_SIZE of the client
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, addr: nc.RemoteAddr().String(),
		streams: make(map[uint32]*stream), sendWindow: 65535, peerWindow: 65535, recvWindow: connWindow}
	c.peerFrame.Store(16384)
	c.flow.L = &c.mu
	if tc, ok := nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		c.tls = &st
	}
	ctx := context.Background()
	if s.ConnContext != nil {
		ctx = s.ConnContext(ctx, nc)
	}
	c.ctx = ctx
	c.br = bufio.NewReaderSize(nc, 4<<10)
	c.rf = http2.NewFramer(nil, c.br)
	c.hdec = newHeaderDecoder(s.maxHeaderList())
	c.rf.SetMaxReadFrameSize(maxFrameSize)
	c.bw = bufio.NewWriterSize(nc, writeBufferSize)
	c.wf = http2.NewFramer(c.bw, nil)
	c.henc = hpack.NewEncoder((*headerBuf)(c))
	return c
}

// headerBuf is the HPACK encoder's output: c.hbuf.
type headerBuf conn

func (b *headerBuf) Write(p []byte) (int, error) {
	b.hbuf = append(b.hbuf, p...)
	return len(p), nil
}

// serve reads and acts on the connection's frames until it ends.
func (c *conn) serve() error {
	defer c.end()
	if d := c.s.ReadHeaderTimeout; d > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(d))
	}
	var preface [len(clientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != clientPreface {
		return nil // not HTTP/2, or gone: nothing to answer
	}
	err := c.write(func() error {
		if err := c.wf.WriteSettings(
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.s.maxStreams()},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
			http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxFrameSize},
			http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.s.maxHeaderList()},
		); err != nil {
			return err
		}
		return c.wf.WriteWindowUpdate(0, connWindow-65535)
	})
	if err != nil {
		return nil
	}
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	first := true
	for {
		f, err := c.readFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) && !first {
				c.resetStream(se.StreamID, se.Code)
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.mu.Lock()
				gone := c.goingAway
				c.mu.Unlock()
				if !gone {
					c.fail(http2.ErrCodeNo) // idle
				}
				return nil
			}
			return c.readFailed(err)
		}
		if first {
			sf, ok := f.(*http2.SettingsFrame)
			if !ok || sf.IsAck() {
				c.fail(http2.ErrCodeProtocol)
				return nil
			}
			first = false
			c.idleDeadline()
		}
		err = c.frame(f)
		if f == &c.hdec.meta {
			c.hdec.done()
		}
		if err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.fail(http2.ErrCode(ce))
				return nil
			}
			return err
		}
	}
}

// readFrame reads the next frame, a HEADERS frame with the CONTINUATIONs
// that complete it, decoded (readHeaders).
func (c *conn) readFrame() (http2.Frame, error) {
	f, err := c.rf.ReadFrame()
	if err != nil {
		return nil, err
	}
	if hf, ok := f.(*http2.HeadersFrame); ok {
		mh, err := c.readHeaders(hf)
		if err != nil {
			c.hdec.done() // a block refused is let go of as one acted on
			return nil, err
		}
		return mh, nil
	}
	return f, nil
}

// readFailed ends the connection after ReadFrame's err, answering a
// connection error with GOAWAY.
func (c *conn) readFailed(err error) error {
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ce):
		c.fail(http2.ErrCode(ce))
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.fail(http2.ErrCodeFrameSize)
	}
	return nil // the client went, or broke the protocol: both answered
}

// end is the end of serve: every stream still open is cut, the
// connection closed.
func (c *conn) end() {
	c.mu.Lock()
	c.closed = true
	for _, st := range c.streams {
		st.cut(errConnClosed)
	}
	c.flow.Broadcast()
	c.mu.Unlock()
	// What is buffered (a GOAWAY) goes out, within a second: a writer
	// blocked on a client that reads nothing fails by then and lets go of
	// the lock.
	_ = c.nc.SetWriteDeadline(time.Now().Add(goAwayLinger))
	c.wmu.Lock()
	if c.werr == nil {
		_ = c.bw.Flush()
		c.werr = errConnClosed
	}
	c.wmu.Unlock()
	_ = c.nc.Close()
}

// goAwayLinger is how long a connection that went away is read (and what
// it sends dropped) before it is closed, so that the close does not reset
// the connection under answers still on their way to the client, as a
// close with unread bytes would; Go's server waits as long.
const goAwayLinger = time.Second

// linger ends a connection that went away once the client has closed it
// or goAwayLinger has passed (serve's read ends either way).
func (c *conn) linger() {
	_ = c.nc.SetReadDeadline(time.Now().Add(goAwayLinger))
}

var (
	errConnClosed  = errors.New("h2server: connection closed")
	errStreamReset = errors.New("h2server: stream reset by the client")
)

// fail answers a connection error: GOAWAY with code, then the
// connection closes (serve returns).
func (c *conn) fail(code http2.ErrCode) {
	c.mu.Lock()
	last := c.maxID
	c.goingAway = true
	c.mu.Unlock()
	_ = c.write(func() error { return c.wf.WriteGoAway(last, code, nil) })
}

// goAway tells the client no stream past those it opened will be served,
// and closes the connection once they are over (at once if none is open).
func (c *conn) goAway(code http2.ErrCode) {
	c.mu.Lock()
	if c.goingAway || c.closed {
		c.mu.Unlock()
		return
	}
	c.goingAway = true
	last, idle, started := c.maxID, c.open == 0, c.started
	c.mu.Unlock()
	if !started { // still reading the preface: nothing to tell
		_ = c.nc.Close()
		return
	}
	_ = c.write(func() error { return c.wf.WriteGoAway(last, code, nil) })
	if idle {
		c.linger()
	}
}

// idleDeadline bounds the read of the next frame by the idle timeout
// when no stream is open, and lifts the bound when one is.
func (c *conn) idleDeadline() {
	c.mu.Lock()
	idle := c.open == 0
	c.mu.Unlock()
	if d := c.s.IdleTimeout; d > 0 && idle {
		_ = c.nc.SetReadDeadline(time.Now().Add(d))
	} else {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
}

// write runs fn, which writes frames, under the write lock, and flushes
// when no other writer waits for the lock (the last of several flushes
// for all). A failed write fails every later one: the connection is
// closed.
func (c *conn) write(fn func() error) error {
	c.waiting.Add(1)
	c.wmu.Lock()
	err := c.werr
	if err == nil {
		err = fn()
	}
	return c.release(err)
}

// maxQueuedControl bounds the control frames a connection keeps for a
// writer that holds the lock: a client that sends PINGs (or anything else
// answered) faster than it reads has its connection closed.
const maxQueuedControl = 1024

var errControlFlood = errors.New("h2server: too many control frames waiting to be written")

// control has fn's frames, a control frame, written without waiting for
// them to be: when the write lock is free it is taken, and a goroutine of
// its own writes them and flushes (the client may not be reading);
// otherwise the writer that has it writes them before it lets go
// (release).
func (c *conn) control(fn func() error) error {
	c.ctlMu.Lock()
	if len(c.ctl) >= maxQueuedControl {
		c.ctlMu.Unlock()
		_ = c.nc.Close()
		return errControlFlood
	}
	c.ctl = append(c.ctl, fn)
	c.ctlMu.Unlock()
	if !c.wmu.TryLock() {
		return nil // whoever has it writes fn before it lets go
	}
	c.waiting.Add(1)
	go func() { _ = c.release(c.werr) }() // the lock goes with it
	return nil
}

// release ends a write under the lock whose error is err: it writes the
// control frames left meanwhile (or drops them, the connection failed),
// flushes when no other writer waits, closes the connection on a failure
// and lets go of the lock. Before it would flush what its write left, it
// yields its processor once, the lock still held: the goroutines that
// are ready to run do, and those with frames for this connection (the
// answers of other streams whose endpoints answered in the same poll)
// queue for the lock, which leaves the flush to the last of them, so
// that answers ready together leave in one write, not one each (an
// event loop's batching; 0.65 writes to the client a request under
// h2load -m10 before, 0.05 after). With nothing else ready the yield
// returns at once. Then it looks again: a control frame left
// after its last look, while it still held the lock, is written by the
// next holder, which it becomes again when the lock is free; one left
// after the lock was let go finds it free itself (control's TryLock) or
// held by a writer that will look. It returns the first error.
func (c *conn) release(err error) error {
	first := err
	yielded := false
	for {
		if !yielded && err == nil && c.waiting.Load() == 1 && c.bw.Buffered() > 0 {
			runtime.Gosched()
			yielded = true
		}
		err = c.writeControlLocked(err)
		if c.waiting.Add(-1) == 0 && err == nil {
			err = c.flushLocked()
		}
		if err != nil && c.werr == nil {
			c.werr = err
			_ = c.nc.Close()
		}
		if first == nil {
			first = err
		}
		c.wmu.Unlock()
		if !c.controlLeft() || !c.wmu.TryLock() {
			return first
		}
		c.waiting.Add(1)
		err = c.werr
	}
}

// writeControlLocked writes the control frames left, or drops them when
// err, the write's failure, is not nil (the connection is closed); the
// write lock is held. It returns err, or the first frame's failure.
func (c *conn) writeControlLocked(err error) error {
	c.ctlMu.Lock()
	fns := c.ctl
	c.ctl = nil
	c.ctlMu.Unlock()
	for _, fn := range fns {
		if err != nil {
			break
		}
		err = fn()
	}
	return err
}

// controlLeft reports whether control frames wait to be written.
func (c *conn) controlLeft() bool {
	c.ctlMu.Lock()
	n := len(c.ctl)
	c.ctlMu.Unlock()
	return n > 0
}

// flushLocked writes what the buffer holds, within the write timeout.
func (c *conn) flushLocked() error {
	if c.bw.Buffered() == 0 {
		return nil
	}
	if d := c.s.WriteTimeout; d > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(d))
	}
	return c.bw.Flush()
}

// frame acts on one frame read. A connection error it returns ends the
// connection with GOAWAY.
func (c *conn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.headers(f)
	case *http2.DataFrame:
		return c.data(f)
	case *http2.SettingsFrame:
		return c.settings(f)
	case *http2.WindowUpdateFrame:
		return c.windowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.rstStream(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		data := f.Data
		return c.control(func() error { return c.wf.WritePing(true, data) })
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			c.resetStream(f.StreamID, http2.ErrCodeProtocol)
		}
		return nil
	case *http2.GoAwayFrame:
		c.goAway(http2.ErrCodeNo)
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	case *http2.ContinuationFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // not after HEADERS: the framer joins those
	default:
		return nil // unknown frame types are ignored (RFC 9113, section 5.5)
	}
}

// settings applies the client's SETTINGS and acknowledges them.
func (c *conn) settings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	var bad error
	var table *uint32
	_ = f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			bad = err
			return err
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			v := s.Val
			table = &v
		case http2.SettingInitialWindowSize:
			c.mu.Lock()
			delta := int64(s.Val) - c.peerWindow
			c.peerWindow = int64(s.Val)
			for _, st := range c.streams {
				st.send += delta
				if st.send > 1<<31-1 {
					bad = http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			c.flow.Broadcast()
			c.mu.Unlock()
		case http2.SettingMaxFrameSize:
			c.peerFrame.Store(s.Val)
		}
		return bad
	})
	if bad != nil {
		return bad
	}
	return c.control(func() error {
		if table != nil {
			c.henc.SetMaxDynamicTableSizeLimit(*table)
		}
		return c.wf.WriteSettingsAck()
	})
}

// windowUpdate grows a send window.
func (c *conn) windowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		c.sendWindow += inc
		if c.sendWindow > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.flow.Broadcast()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
		}
		return nil // a closed one: frames in flight
	}
	st.send += inc
	if st.send > 1<<31-1 {
		c.mu.Unlock()
		c.resetStream(f.StreamID, http2.ErrCodeFlowControl)
		c.mu.Lock()
		return nil
	}
	c.flow.Broadcast()
	return nil
}

// rstStream ends a stream the client reset.
func (c *conn) rstStream(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	if f.StreamID > c.maxID {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	if st := c.streams[f.StreamID]; st != nil {
		st.cut(errStreamReset)
		c.closeLocked(st)
	}
	c.mu.Unlock()
	return nil
}

// wasReset reports whether this side reset stream id lately (c.mu held):
// frames the client sent before it learnt are ignored (RFC 9113,
// section 5.1, "closed").
func (c *conn) wasReset(id uint32) bool {
	for _, r := range c.resets {
		if r == id {
			return true
		}
	}
	return false
}

// resetStream resets the stream id with code (a stream error of ours)
// and forgets it.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		st.cut(http2.StreamError{StreamID: id, Code: code})
		c.closeLocked(st)
	}
	c.resets[c.resetAt%len(c.resets)] = id
	c.resetAt++
	c.mu.Unlock()
	_ = c.control(func() error { return c.wf.WriteRSTStream(id, code) })
}

// closeLocked forgets st, whose both halves are closed or which was reset;
// c.mu is held. Once the last stream of a connection going away is over,
// the connection closes.
func (c *conn) closeLocked(st *stream) {
	if _, ok := c.streams[st.id]; !ok {
		return
	}
	delete(c.streams, st.id)
	c.open--
	c.flow.Broadcast()
	if c.open == 0 {
		if c.goingAway {
			go c.closeAfterFlush()
		} else if d := c.s.IdleTimeout; d > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(d))
		}
	}
}

// closeAfterFlush ends a connection that went away, once what it has
// buffered is written (linger).
func (c *conn) closeAfterFlush() {
	_ = c.write(func() error { return nil }) // the control frames left, the flush
	c.linger()
}

// Serve serves each connection accepted on ln (TLS connections that
// negotiated h2, handed over by a TLS front) on a goroutine of its own,
// until ln is closed (nil) or fails.
func (s *Server) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() { _ = s.ServeConn(c) }()
	}
}
