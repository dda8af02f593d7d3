package proxy

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// UpgradeMismatch returns why a 101 answer cannot be relayed to a client
// that asked to upgrade to reqType, or nil: the answer must name Upgrade
// in its Connection field and switch to that protocol (case aside), as
// Go's standard reverse proxy checks.
func UpgradeMismatch(reqType string, resNamesUpgrade bool, resUpgrade string) error {
	resType := ""
	if resNamesUpgrade {
		resType = resUpgrade
	}
	for i := 0; i < len(resType); i++ {
		if resType[i] < ' ' || resType[i] > '~' {
			return fmt.Errorf("upstream tried to switch to an invalid protocol %q", resType)
		}
	}
	if reqType == "" || !strings.EqualFold(reqType, resType) {
		return fmt.Errorf("upstream tried to switch protocol %q when %q was requested", resType, reqType)
	}
	return nil
}

// TunnelHead builds the 101 answer head relayed to the client: the
// gateway's Set-Cookie first, then the endpoint's fields as they came
// (Connection and Upgrade among them) but for any framing, then the
// request id unless the endpoint gave one.
type TunnelHead struct {
	b      []byte
	hasRID bool
}

// NewTunnelHead begins the head of a 101 answer, with the gateway's
// Set-Cookie setCookie first when it is not "".
func NewTunnelHead(setCookie string) *TunnelHead {
	h := &TunnelHead{b: append(make([]byte, 0, 512), "HTTP/1.1 101 Switching Protocols\r\n"...)}
	if setCookie != "" {
		h.field("Set-Cookie", setCookie)
	}
	return h
}

// Add adds the endpoint's field k: v, unless it is framing.
func (h *TunnelHead) Add(k, v string) {
	if strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Transfer-Encoding") {
		return
	}
	if strings.EqualFold(k, "X-Request-Id") {
		h.hasRID = true
	}
	h.field(k, v)
}

func (h *TunnelHead) field(k, v string) {
	h.b = append(h.b, k...)
	h.b = append(h.b, ": "...)
	h.b = append(h.b, cleanValue(v)...)
	h.b = append(h.b, "\r\n"...)
}

// End returns the head, ended.
func (h *TunnelHead) End(rid string) []byte {
	if !h.hasRID {
		h.field("X-Request-Id", rid)
	}
	return append(h.b, "\r\n"...)
}

// PoolSide is a connection of an endpoint's pool as a tunnel's endpoint
// side: it reads through the connection's buffer, which may hold the
// first bytes after the 101 head.
type PoolSide struct{ Conn *Conn }

// Read reads the endpoint's bytes, those buffered first.
func (s PoolSide) Read(p []byte) (int, error) { return s.Conn.Reader.Read(p) }

// Write writes to the endpoint.
func (s PoolSide) Write(p []byte) (int, error) { return s.Conn.Net.Write(p) }

// Close closes the connection (it never goes back to the pool), after
// cutting a write still under way on it: a TLS connection's Close would
// wait for that write, to send its close_notify after it.
func (s PoolSide) Close() error {
	_ = s.Conn.Net.SetDeadline(aLongTimeAgo)
	return s.Conn.Net.Close()
}

// onlyReader and onlyWriter hide a ReaderFrom or WriterTo, so that
// io.CopyBuffer copies through the pooled buffer it is given.
type onlyReader struct{ io.Reader }

type onlyWriter struct{ io.Writer }

// TunnelKeepAlive is the TCP keep-alive of a tunnel's client socket
// (RelayTunnel): the proxy listener accepts connections without probes,
// as HTTP bounds its own waits (the idle and header timeouts), but a
// tunnel may stay quiet for hours, and only probes find a client that
// vanished without closing. These are Go's defaults for a connection it
// accepts: the first probe after 15 s of quiet, then every 15 s, given up
// after 9 unanswered.
var TunnelKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}

// probeIdle turns TunnelKeepAlive on for the TCP socket under c, if it
// has one.
func probeIdle(c net.Conn) {
	if sc, ok := socketOf(c); ok {
		if tc, ok := sc.(*net.TCPConn); ok {
			_ = tc.SetKeepAliveConfig(TunnelKeepAlive)
		}
	}
}

// socketOf returns the socket under c: c itself, or what the wrappers
// around it (a TLS connection's NetConn, an Unwrap method) give.
func socketOf(c net.Conn) (syscall.Conn, bool) {
	for range 8 {
		switch w := c.(type) {
		case syscall.Conn:
			return w, true
		case interface{ NetConn() net.Conn }:
			c = w.NetConn()
		case interface{ Unwrap() net.Conn }:
			c = w.Unwrap()
		default:
			return nil, false
		}
	}
	return nil, false
}

// RelayTunnel copies bytes both ways between a client and an endpoint, from
// the 101 answer on, until either side closes or fails: client is the
// client's connection, read through cr (which holds what its server read of
// it already), up the endpoint's side. Then it closes up, cuts client (a
// deadline in the past unblocks a copy still on it) and returns once both
// copies have ended; the caller closes client. Both fronts' tunnels run it.
func (p *Proxy) RelayTunnel(client net.Conn, cr io.Reader, up io.ReadWriteCloser) {
	probeIdle(client)
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			_ = up.Close()
			_ = client.SetDeadline(aLongTimeAgo) // unblocks the copies on client
		})
	}
	defer stop() // also when a copy panics
	down := make(chan struct{})
	go func() {
		defer close(down)
		defer stop()
		buf := p.buffers.Get()
		defer p.buffers.Put(buf)
		_, _ = io.CopyBuffer(onlyWriter{client}, onlyReader{up}, buf)
	}()
	buf := p.buffers.Get()
	_, _ = io.CopyBuffer(onlyWriter{up}, onlyReader{cr}, buf)
	p.buffers.Put(buf)
	stop()
	<-down
}
