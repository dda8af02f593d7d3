package fastfront

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/dwara/dwara/gateway/proxy"

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
// (RelayTunnel, which the net/http front's tunnels run too).
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
func (p server) fastUpgrade(ctx *fasthttp.RequestCtx, x *fastExchange, rt proxy.Route, rid string, ip, upgrade []byte) bool {
	cl := ctx.Request.Header.ContentLength()
	// An upgrade is neither retried nor failed over: x.a stays on rt's
	// target and endpoint.
	u, ep := rt.Target.Up, rt.Endpoint
	xc, err := p.ExchangeRetrying(x, &x.a, &x.req, func(c *proxy.Conn, ep *proxy.Endpoint, tg *proxy.Target) (bool, error) {
		return p.fastSend(ctx, c, ep, x, tg, rid, ip, cl, upgrade)
	})
	if err != nil {
		x.releaseUp()
		x.code = p.fastForwardError(ctx, x, rt, rid, err)
		return false
	}
	uh := &xc.Conn.Head
	x.code = uh.Status
	p.Answered(u, ep, x.code)
	if x.code != http.StatusSwitchingProtocols {
		x.conn = xc.Conn
		return x.respond(ctx, rid)
	}
	if err := proxy.UpgradeMismatch(proxy.UnsafeString(upgrade), uh.Named([]byte("Upgrade")), proxy.UnsafeString(uh.First("Upgrade"))); err != nil {
		xc.Conn.Net.Close()
		x.releaseUp()
		x.code = p.fastForwardError(ctx, x, rt, rid, err)
		return false
	}
	head := proxy.NewTunnelHead(rt.SetCookie)
	for _, f := range uh.Fields {
		head.Add(proxy.UnsafeString(f.Name), proxy.UnsafeString(f.Value))
	}
	x.releaseUp()
	fastStartTunnel(ctx, &fastTunnel{p: p.Proxy, x: x, up: proxy.PoolSide{Conn: xc.Conn}, head: head.End(rid)})
	return true
}

// fastTunnel is an upgraded connection between a client and an endpoint,
// from the 101 answer on. It owns the exchange's bookkeeping and the
// endpoint's side until it ends: run, called by fasthttp with the client's
// connection, or abandon, when fasthttp closed that connection instead;
// whichever claims it first.
type fastTunnel struct {
	p    *proxy.Proxy
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

// fastConnState is the fasthttp server's ConnState hook (NewServer): a
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
	t.x.code = proxy.StatusClientGone
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
	t.p.RelayTunnel(c, c, t.up)
}
