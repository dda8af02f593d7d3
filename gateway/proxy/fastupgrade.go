package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// Upgrade requests on the fasthttp front. The request is routed as any
// other; its head goes to the endpoint with the header rules of
// writeFastHead plus Connection: Upgrade and the client's Upgrade field,
// on a connection of the endpoint's pool (over TLS to an https endpoint).
// The answer head is read under the upstream's response-header timeout,
// with the client looked at meanwhile (fastTransmit). An answer other
// than 101 is relayed as a normal response. A 101 naming the protocol the
// client asked for is relayed on the client's connection, which fasthttp
// hands over (hijack) once the handler has returned, and a tunnel copies
// bytes both ways until either side closes, then closes both
// (relayTunnel, which the net/http front's tunnels run too).
//
// Bookkeeping, as the net/http front's (upgrade.go): an upgrade is not
// retried, its transport failures count for the passive checks and its
// answer header as a success; a tunnel is counted 101 when it ends, with
// its whole duration, in the endpoint's in-flight count until then.
// fasthttp does not hand the connection over when it fails to write what
// it still owed the client (answers to earlier pipelined requests): it
// closes it, and fastConnState, the server's ConnState hook, then ends the
// tunnel's bookkeeping (counted 499: the client never had the 101).

// fastUpgrade serves an upgrade request and reports whether the tunnel,
// or the body of an answer other than 101, took the exchange over.
// upgrade is the client's Upgrade value.
func (p *Proxy) fastUpgrade(ctx *fasthttp.RequestCtx, x *fastExchange, rt route, rid string, ip, upgrade []byte) bool {
	cl := ctx.Request.Header.ContentLength()
	u, ep := rt.tg.up, rt.ep
	xc, err := p.exchangeRetrying(x, u, &x.a, &x.req, func(c *upConn, ep *endpoint) (bool, error) {
		return p.fastSend(ctx, c, ep, x, rt.tg, rid, ip, cl, upgrade)
	})
	if err != nil {
		x.releaseUp()
		x.code = p.fastForwardError(ctx, x, rt, rid, err)
		return false
	}
	uh := &xc.conn.head
	x.code = uh.status
	p.answered(u, ep, x.code)
	if x.code != http.StatusSwitchingProtocols {
		x.conn = xc.conn
		return x.respond(ctx, rid)
	}
	if err := upgradeMismatch(b2s(upgrade), uh.named([]byte("Upgrade")), b2s(uh.first("Upgrade"))); err != nil {
		xc.conn.nc.Close()
		x.releaseUp()
		x.code = p.fastForwardError(ctx, x, rt, rid, err)
		return false
	}
	head := newTunnelHead(rt.setCookie)
	for _, f := range uh.fields {
		head.add(b2s(f.name), b2s(f.value))
	}
	x.releaseUp()
	fastStartTunnel(ctx, &fastTunnel{p: p, x: x, up: poolSide{xc.conn}, head: head.end(rid)})
	return true
}

// upgradeMismatch returns why a 101 answer cannot be relayed to a client
// that asked to upgrade to reqType, or nil: the answer must name Upgrade
// in its Connection field and switch to that protocol (case aside), as
// Go's standard reverse proxy checks.
func upgradeMismatch(reqType string, resNamesUpgrade bool, resUpgrade string) error {
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

// tunnelHead builds the 101 answer head relayed to the client: the
// gateway's Set-Cookie first, then the endpoint's fields as they came
// (Connection and Upgrade among them) but for any framing, then the
// request id unless the endpoint gave one.
type tunnelHead struct {
	b      []byte
	hasRID bool
}

func newTunnelHead(setCookie string) *tunnelHead {
	h := &tunnelHead{b: append(make([]byte, 0, 512), "HTTP/1.1 101 Switching Protocols\r\n"...)}
	if setCookie != "" {
		h.field("Set-Cookie", setCookie)
	}
	return h
}

// add adds the endpoint's field k: v, unless it is framing.
func (h *tunnelHead) add(k, v string) {
	if strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Transfer-Encoding") {
		return
	}
	if strings.EqualFold(k, "X-Request-Id") {
		h.hasRID = true
	}
	h.field(k, v)
}

func (h *tunnelHead) field(k, v string) {
	h.b = append(h.b, k...)
	h.b = append(h.b, ": "...)
	h.b = append(h.b, cleanValue(v)...)
	h.b = append(h.b, "\r\n"...)
}

// end returns the head, ended.
func (h *tunnelHead) end(rid string) []byte {
	if !h.hasRID {
		h.field("X-Request-Id", rid)
	}
	return append(h.b, "\r\n"...)
}

// fastTunnel is an upgraded connection between a client and an endpoint,
// from the 101 answer on. It owns the exchange's bookkeeping and the
// endpoint's side until it ends: run, called by fasthttp with the client's
// connection, or abandon, when fasthttp closed that connection instead;
// whichever claims it first.
type fastTunnel struct {
	p    *Proxy
	x    *fastExchange // counted 101 when the tunnel ends
	up   io.ReadWriteCloser
	head []byte // the 101 answer head for the client
	// client is the client's connection as fasthttp's ConnState hook names
	// it (the key of fastPending).
	client  net.Conn
	claimed atomic.Bool
}

// fastPending are the tunnels whose client connection fasthttp has not
// handed over yet, by that connection; n is how many, so that the
// ConnState hook costs the connections of other requests one atomic load.
var fastPending struct {
	n atomic.Int64
	m sync.Map // net.Conn → *fastTunnel
}

// fastStartTunnel asks fasthttp to hand the client's connection of ctx to
// t once the handler returns, without writing an answer (t writes the
// 101 itself).
func fastStartTunnel(ctx *fasthttp.RequestCtx, t *fastTunnel) {
	t.pend(ctx.Conn())
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(t.run)
}

// pend makes t wait for client, the client's connection: counted 101 from
// now on, ended by run or abandon.
func (t *fastTunnel) pend(client net.Conn) {
	t.x.code = http.StatusSwitchingProtocols
	t.x.ctx = nil // the tunnel outlives the request
	t.client = client
	fastPending.m.Store(client, t)
	fastPending.n.Add(1)
}

// fastConnState is the fasthttp server's ConnState hook (NewFastServer): a
// connection fasthttp closes while a tunnel waits for it was not handed
// over, and never will be; the tunnel is abandoned.
func fastConnState(c net.Conn, state fasthttp.ConnState) {
	if state != fasthttp.StateClosed || fastPending.n.Load() == 0 {
		return
	}
	if t, ok := fastPending.m.Load(c); ok {
		t.(*fastTunnel).abandon()
	}
}

// claim makes the caller the one that ends t, or reports false when
// another did.
func (t *fastTunnel) claim() bool {
	if !t.claimed.CompareAndSwap(false, true) {
		return false
	}
	if fastPending.m.CompareAndDelete(t.client, t) {
		fastPending.n.Add(-1)
	}
	return true
}

// abandon ends a tunnel whose client connection fasthttp closed instead
// of handing it over: the client never had the 101.
func (t *fastTunnel) abandon() {
	if !t.claim() {
		return
	}
	_ = t.up.Close()
	t.x.code = statusClientGone
	t.x.finish(nil)
}

// run is the hijack handler: it writes the 101 head to the client, then
// copies bytes both ways until either side closes or fails, closes both,
// and ends the bookkeeping. fasthttp closes c after run returns (unless
// the server keeps hijacked connections, when c.Close does); no copy is
// still reading c by then, since c reads through fasthttp's buffer, which
// fasthttp reuses.
func (t *fastTunnel) run(c net.Conn) {
	if !t.claim() {
		return
	}
	defer func() { // also when a copy panics
		_ = c.Close()
		t.x.finish(nil)
	}()
	if _, err := c.Write(t.head); err != nil {
		_ = t.up.Close()
		return
	}
	t.p.relayTunnel(c, c, t.up)
}

// poolSide is a connection of an endpoint's pool as a tunnel's endpoint
// side: it reads through the connection's buffer, which may hold the
// first bytes after the 101 head.
type poolSide struct{ c *upConn }

// Read reads the endpoint's bytes, those buffered first.
func (s poolSide) Read(p []byte) (int, error) { return s.c.br.Read(p) }

// Write writes to the endpoint.
func (s poolSide) Write(p []byte) (int, error) { return s.c.nc.Write(p) }

// Close closes the connection (it never goes back to the pool), after
// cutting a write still under way on it: a TLS connection's Close would
// wait for that write, to send its close_notify after it.
func (s poolSide) Close() error {
	_ = s.c.nc.SetDeadline(aLongTimeAgo)
	return s.c.nc.Close()
}

// onlyReader and onlyWriter hide a ReaderFrom or WriterTo, so that
// io.CopyBuffer copies through the pooled buffer it is given.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }
