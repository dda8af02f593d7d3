package proxy

import (
	"io"
	"net"
	"net/http"
	"sync"
)

// Upgrade requests (websockets) on the net/http front. forward sends one as
// any other request, over the endpoint's pool, with Connection: Upgrade and
// the client's Upgrade field (writeHead), and does not retry it. An
// answer other than 101 is relayed as a normal response. A 101 naming the
// protocol the client asked for (upgradeMismatch) is relayed by tunnel: the
// client's connection is hijacked, the 101 head written on it, and
// relayTunnel, which the fasthttp front's tunnels run too, copies bytes
// both ways until either side closes. The request's bookkeeping, in
// serveEndpoint, ends when the tunnel does: counted 101, with its whole
// duration, in the endpoint's in-flight count until then.

// tunnel relays the 101 answer on c (c.head) of ep to r, an upgrade
// request to the protocol upgrade, and returns the status counted once the
// tunnel has ended. stop ends the watch of the client that forward set on
// c; false: the client went away already.
func (p *Proxy) tunnel(w *statusWriter, r *http.Request, ep *endpoint, c *upConn, upgrade string, stop func() bool) int {
	if !stop() {
		c.nc.Close()
		return statusClientGone
	}
	uh := &c.head
	err := upgradeMismatch(upgrade, uh.named([]byte("Upgrade")), b2s(uh.first("Upgrade")))
	if err != nil {
		c.nc.Close()
		return p.forwardError(w, r, ep, err)
	}
	client, brw, err := w.Hijack()
	if err != nil {
		// An HTTP/2 connection, which has no connection to hand over.
		c.nc.Close()
		return p.forwardError(w, r, ep, err)
	}
	defer client.Close()
	// The gateway's Set-Cookie (a sticky session's first answer) is the
	// one field set on w before the exchange.
	head := newTunnelHead(w.Header().Get("Set-Cookie"))
	for _, f := range uh.fields {
		head.add(b2s(f.name), b2s(f.value))
	}
	if _, err := client.Write(head.end(w.out.requestID)); err != nil {
		c.nc.Close()
		return statusClientGone
	}
	// The client's first bytes may be buffered in brw already.
	p.relayTunnel(client, brw.Reader, poolSide{c})
	return http.StatusSwitchingProtocols
}

// relayTunnel copies bytes both ways between a client and an endpoint, from
// the 101 answer on, until either side closes or fails: client is the
// client's connection, read through cr (which holds what its server read of
// it already), up the endpoint's side. Then it closes up, cuts client (a
// deadline in the past unblocks a copy still on it) and returns once both
// copies have ended; the caller closes client. Both fronts' tunnels run it.
func (p *Proxy) relayTunnel(client net.Conn, cr io.Reader, up io.ReadWriteCloser) {
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
