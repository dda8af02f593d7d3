package node

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testnet"
)

// A gateway's proxy listener accepts its first connection only once a
// generation is applied: a request sent to a gateway that cannot reach its
// database (and has no saved generation) waits, unanswered, and is served
// by the generation once the database answers, instead of a "no
// generation" 503.
func TestGatewayAcceptsOnceApplied(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a, b := pools(t)
		direct := dbtest.New(t)
		publishTo(t, openTestStore(t, direct), specJSON(a, b, 100, 0))
		relayed, relay := relayedURL(t, direct)
		relay.Cut()
		p := startGateway(t, GatewayConfig{Front: front, DatabaseURL: relayed, StateDir: t.TempDir()})

		c, err := net.DialTimeout("tcp", p.Proxy, wait)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: web\r\nX-Request-Id: ready-1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		// Nothing is applied while the database is away, so nothing may
		// answer: a read ends at its deadline with no byte.
		br := bufio.NewReader(c)
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read before any generation was applied: %v, want no answer yet (a deadline)", err)
		}
		relay.Restore()
		_ = c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the answer once the database is back: %v", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Pool") != "pool-a" {
			t.Errorf("the waiting request: %d from %q, want 200 from pool-a (the published generation)", resp.StatusCode, resp.Header.Get("X-Pool"))
		}
	})
}

// A gateway stopped before any generation was applied returns nil and
// refuses what its backlog held: the waiting client sees its connection
// end, with no answer.
func TestGatewayStoppedBeforeReady(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		p := startGateway(t, GatewayConfig{
			Front:       front,
			DatabaseURL: "postgres://dwara@" + testnet.ClosedAddr(t) + "/dwara?sslmode=disable",
			StateDir:    t.TempDir(),
		})
		c, err := net.DialTimeout("tcp", p.Proxy, wait)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: web\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		p.stop() // fails the test unless the gateway returns nil in time
		_ = c.SetReadDeadline(time.Now().Add(wait))
		n, err := c.Read(make([]byte, 1))
		if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the queued connection after the stop: %d bytes, %v; want it ended with no answer", n, err)
		}
	})
}
