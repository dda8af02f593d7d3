package fastfront

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// TestFastTunnelAbandoned: a tunnel whose client connection fasthttp
// closes instead of handing it over (it could not write what it still
// owed the client) is ended by the server's ConnState hook: the
// endpoint's side is closed, the request counted 499, nothing left in
// flight; a hand-over after that does nothing.
func TestFastTunnelAbandoned(t *testing.T) {
	t.Parallel()
	metrics := prometheus.NewRegistry()
	p := proxy.New(proxy.Options{Metrics: metrics})
	t.Cleanup(p.Close)
	spec, err := config.Parse([]byte("upstreams: [{name: u, endpoints: [\"10.0.0.1:80\"]}]\nservices: [{name: web, upstream: u}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(spec, 1); err != nil {
		t.Fatal(err)
	}
	rt := p.Route(p.Current(), &proxy.Request{Host: "x", Path: "/", RequestID: "r"})
	if rt.Status != 0 {
		t.Fatalf("route: %d %s", rt.Status, rt.Detail)
	}
	x := &fastExchange{p: p, a: rt.Begin(time.Now()), start: time.Now()}
	upSide, upPeer := net.Pipe()
	defer upPeer.Close()
	client, clientPeer := net.Pipe()
	defer clientPeer.Close()
	tun := &fastTunnel{p: p, x: x, up: upSide, head: []byte("HTTP/1.1 101 Switching Protocols\r\n\r\n")}
	tun.pend(client)
	if n := p.Registry().Get(rt.Endpoint.Addr).Inflight(); n != 1 {
		t.Fatalf("%d in flight while the tunnel waits, want 1", n)
	}
	fastConnState(client, fasthttp.StateIdle) // not the end of the connection
	if n := p.Registry().Get(rt.Endpoint.Addr).Inflight(); n != 1 {
		t.Fatalf("%d in flight after another state, want 1", n)
	}
	fastConnState(client, fasthttp.StateClosed)
	if n := p.Registry().Get(rt.Endpoint.Addr).Inflight(); n != 0 {
		t.Errorf("%d in flight after the connection closed, want 0", n)
	}
	if got := requestsCounted(t, metrics, "499"); got != 1 {
		t.Errorf("%v requests counted 499, want 1", got)
	}
	if _, err := upPeer.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the endpoint's side: read %v, want it closed", err)
	}
	if _, ok := fastPending.m.Load(client); ok {
		t.Error("the tunnel is still pending")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tun.run(client) // a late hand-over: nothing to write, nothing to count
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no end of the late hand-over within 10s")
	}
	_ = clientPeer.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, _ := clientPeer.Read(make([]byte, 64)); n != 0 {
		t.Errorf("a late hand-over wrote %d bytes to the client", n)
	}
	if got := requestsCounted(t, metrics, "101"); got != 0 {
		t.Errorf("%v requests counted 101, want 0", got)
	}
}

// requestsCounted is dwara_requests_total of service web, upstream u and
// code in reg, 0 when there is no such series.
func requestsCounted(t *testing.T, reg *prometheus.Registry, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "dwara_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["service"] == "web" && l["upstream"] == "u" && l["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
