package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestH2CUpgradeForwardedPlain: an upgrade to h2c is never honoured (the
// gateway does not speak HTTP/2 without TLS to endpoints): the request is
// forwarded as a plain HTTP/1.1 request, without its Upgrade and
// HTTP2-Settings fields, answered as any, and the connection kept.
func TestH2CUpgradeForwardedPlain(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		for _, upgrade := range []string{"h2c", "h2c, websocket", "websocket, H2C"} {
			t.Run(upgrade, func(t *testing.T) {
				t.Parallel()
				up := startRawRecorder(t)
				g := proxyTo(t, front, 1, up.addr, "")
				rc := dialRaw(t, g)
				rc.write(rawHead("GET /h2c HTTP/1.1", "Host: a.example", "Connection: Upgrade, HTTP2-Settings",
					"Upgrade: "+upgrade, "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"))
				if resp, _ := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusOK {
					t.Fatalf("h2c upgrade: %d; want 200", resp.StatusCode)
				}
				rc.write(rawHead("GET /next HTTP/1.1", "Host: a.example"))
				if resp, _ := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusOK {
					t.Fatalf("the request after it: %d; want 200 on the same connection", resp.StatusCode)
				}
				got := up.since(0)
				if len(got) != 2 {
					t.Fatalf("the endpoint got %d requests; want 2", len(got))
				}
				if n := strings.ToLower(got[0].normal); strings.Contains(n, "upgrade") || strings.Contains(n, "http2-settings") {
					t.Errorf("the endpoint got %s; want no Upgrade, Connection: Upgrade or HTTP2-Settings", got[0].normal)
				}
				t.Log(fmt.Sprint(got[0].normal))
			})
		}
	})
}
