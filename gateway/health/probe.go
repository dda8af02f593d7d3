package health

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/dwara/dwara/gateway/config"
)

// userAgent is the User-Agent of every probe, so upstream access logs can
// tell checks from traffic.
const userAgent = "dwara-health"

// prober sends one check to one endpoint: GET path on a connection of its
// own, closed after the status line and header are read. Each probe dials
// afresh, so a check sees what a new connection of the proxy would see,
// and nothing of a probe (connection, goroutine) outlives it.
type prober struct {
	// addr is the endpoint's host:port, dialled and sent as Host.
	addr string
	// tls is the client configuration of an https endpoint, nil for http.
	tls *tls.Config
	// request is the whole request, built once.
	request string
	dialer  net.Dialer
}

func newProber(addr, path string, tlsConfig *tls.Config, allowLinkLocal bool) *prober {
	return &prober{
		addr:    addr,
		tls:     tlsConfig,
		dialer:  net.Dialer{Control: config.DialControl(allowLinkLocal)},
		request: "GET " + escapeTarget(path) + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: " + userAgent + "\r\nAccept: */*\r\nConnection: close\r\n\r\n",
	}
}

// probe sends the check and returns the final status code of the answer
// (interim 1xx answers are skipped). It gives up when ctx is done; the
// caller puts the check's timeout on ctx.
func (p *prober) probe(ctx context.Context) (int, error) {
	conn, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	// Cut the exchange at once when ctx is cancelled (the checker stops),
	// and wait for that callback before returning, so nothing of the probe
	// is left running.
	cut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = conn.SetDeadline(time.Unix(1, 0))
		close(cut)
	})
	defer func() {
		if !stop() {
			<-cut
		}
	}()
	var rw io.ReadWriter = conn
	if p.tls != nil {
		tc := tls.Client(conn, p.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			return 0, err
		}
		rw = tc
	}
	if _, err := io.WriteString(rw, p.request); err != nil {
		return 0, err
	}
	br := bufio.NewReader(rw)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		if c := resp.StatusCode; c >= 200 || c == http.StatusSwitchingProtocols {
			return c, nil
		}
	}
}

// tlsFor returns the client configuration of a probe to an https endpoint
// at addr (host:port): base (nil means the defaults: the system's roots)
// with the server name set to the endpoint's host unless base names one.
func tlsFor(base *tls.Config, addr string) *tls.Config {
	c := &tls.Config{}
	if base != nil {
		c = base.Clone()
	}
	if c.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	return c
}

// escapeTarget percent-encodes the bytes of a validated health-check path
// that may not stand in a request line as they are (non-ASCII bytes);
// everything else, including a query and existing escapes, is sent as
// written.
func escapeTarget(path string) string {
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		if c := path[i]; c >= 0x80 || c <= ' ' || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
