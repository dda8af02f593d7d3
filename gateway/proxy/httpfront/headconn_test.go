package httpfront

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
)

// trickleConn is a net.Conn that reads its input k bytes at a time.
type trickleConn struct {
	net.Conn // nil: only Read is called
	in       []byte
	k        int
}

func (c *trickleConn) Read(p []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.k)], c.in)
	c.in = c.in[n:]
	return n, nil
}

// TestHeadConnPassesWellFramed: well-framed pipelined requests pass the
// head check byte for byte, however the reads cut them.
func TestHeadConnPassesWellFramed(t *testing.T) {
	t.Parallel()
	in := "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n" +
		"5;ext=\"1\"\r\nworld\r\n000000000000003\r\nabc\r\n0\r\nX-T: 1\r\n\r\n" +
		"GET /c HTTP/1.1\r\nHost: a\r\nX-Long: " + strings.Repeat("v", 5000) + "\r\n\r\n" +
		"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
	for _, k := range []int{1, 2, 3, 7, 64, 4096} {
		c := newHeadConn(&trickleConn{in: []byte(in), k: k})
		var out bytes.Buffer
		p := make([]byte, 100)
		for range 100000 {
			n, err := c.Read(p)
			out.Write(p[:n])
			if err != nil {
				break
			}
		}
		if out.String() != in {
			t.Errorf("reads of %d bytes: the server read %q; want %q", k, out.String(), in)
		}
	}
}
