package httpfront

import (
	"net/http"

	"github.com/dwara/dwara/gateway/proxy"
)

// Upgrade requests (websockets) on the net/http front. forward sends one as
// any other request, over the endpoint's pool, with Connection: Upgrade and
// the client's Upgrade field (WriteHead), and does not retry it. An
// answer other than 101 is relayed as a normal response. A 101 naming the
// protocol the client asked for (UpgradeMismatch) is relayed by tunnel: the
// client's connection is hijacked, the 101 head written on it, and
// RelayTunnel, which the fasthttp front's tunnels run too, copies bytes
// both ways until either side closes. The request's bookkeeping, in
// serveEndpoint, ends when the tunnel does: counted 101, with its whole
// duration, in the endpoint's in-flight count until then.

// tunnel relays the 101 answer on c (c.head) of ep to r, an upgrade
// request to the protocol upgrade, and returns the status counted once the
// tunnel has ended. stop ends the watch of the client that forward set on
// c; false: the client went away already.
func (p server) tunnel(w *statusWriter, r *http.Request, ep *proxy.Endpoint, c *proxy.Conn, upgrade string, stop func() bool) int {
	if !stop() {
		c.Net.Close()
		return proxy.StatusClientGone
	}
	uh := &c.Head
	err := proxy.UpgradeMismatch(upgrade, uh.Named([]byte("Upgrade")), proxy.UnsafeString(uh.First("Upgrade")))
	if err != nil {
		c.Net.Close()
		return p.forwardError(w, r, ep, err)
	}
	client, brw, err := w.Hijack()
	if err != nil {
		// An HTTP/2 connection, which has no connection to hand over.
		c.Net.Close()
		return p.forwardError(w, r, ep, err)
	}
	defer client.Close()
	// The gateway's Set-Cookie (a sticky session's first answer) is the
	// one field set on w before the exchange.
	head := proxy.NewTunnelHead(w.Header().Get("Set-Cookie"))
	for _, f := range uh.Fields {
		head.Add(proxy.UnsafeString(f.Name), proxy.UnsafeString(f.Value))
	}
	if _, err := client.Write(head.End(w.out.RequestID)); err != nil {
		c.Net.Close()
		return proxy.StatusClientGone
	}
	// The client's first bytes may be buffered in brw already.
	p.RelayTunnel(client, brw.Reader, proxy.PoolSide{Conn: c})
	return http.StatusSwitchingProtocols
}
