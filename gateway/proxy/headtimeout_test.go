package proxy

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestHeadTimeoutFromAccept: on every front, the request-head timeout of a
// new connection counts from the accept, not from the first byte, so a
// client that waits before it begins its head a byte at a time does not
// get twice the time. The client connects, waits most of the timeout,
// sends one byte, and the front must answer (408) or close well before the
// timeout has passed again since that byte.
func TestHeadTimeoutFromAccept(t *testing.T) {
	t.Parallel()
	for _, f := range serveEveryFront(t, headTimeout) {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			out := slowFirstByte(t, c, headTimeout)
			if len(out) > 0 && !strings.HasPrefix(string(out), "HTTP/1.1 4") {
				t.Errorf("answer %q; want a 4xx (408) or none", out)
			}
		})
	}
}

// headTimeout is the request-head timeout of the tests of slowFirstByte.
const headTimeout = 2 * time.Second

// slowFirstByte is a client on c, just connected (or just through its
// TLS handshake) to a front whose request-head timeout is timeout, that
// waits most of the timeout, sends one byte of a head and reads until
// the front closes (or resets); it returns what the front sent. Counted
// from the connect, the timeout closes the connection before timeout has
// passed since that byte (unless the front stalls for longer than the
// wait); counted from the byte, it cannot: the test fails then.
func slowFirstByte(t *testing.T, c net.Conn, timeout time.Duration) []byte {
	t.Helper()
	start := time.Now()
	_ = c.SetDeadline(start.Add(conformanceDeadline))
	time.Sleep(timeout * 9 / 10) // the slow client's pause, which is what is tested
	_, _ = io.WriteString(c, "G")
	sent := time.Now()
	out, _ := io.ReadAll(c)
	if closed := time.Now(); !closed.Before(sent.Add(timeout)) {
		t.Errorf("closed %v after the connect, %v after the first byte (%q); want it within %v of the byte: the head timeout counted from the first byte",
			closed.Sub(start).Round(time.Millisecond), closed.Sub(sent).Round(time.Millisecond), out, timeout)
	}
	return out
}
