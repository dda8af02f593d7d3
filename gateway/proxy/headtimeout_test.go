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
	const (
		timeout = 2 * time.Second
		pause   = 1800 * time.Millisecond
		// From the accept, the answer comes at about timeout; counted from
		// the byte, at pause+timeout at the earliest. The margin between
		// the two is for a busy machine.
		within = timeout + 1300*time.Millisecond
	)
	for _, f := range serveEveryFront(t, timeout) {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			_ = c.SetDeadline(start.Add(conformanceDeadline))
			time.Sleep(pause) // the slow client's pause, which is what is tested
			_, _ = io.WriteString(c, "G")
			out, _ := io.ReadAll(c) // until the front closes (or resets)
			if took := time.Since(start); took >= within {
				t.Errorf("closed %v after the connect (%q); want it within %v: the head timeout counted from the first byte", took.Round(time.Millisecond), out, within)
			}
			if len(out) > 0 && !strings.HasPrefix(string(out), "HTTP/1.1 4") {
				t.Errorf("answer %q; want a 4xx (408) or none", out)
			}
		})
	}
}
