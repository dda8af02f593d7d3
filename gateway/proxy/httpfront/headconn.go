package httpfront

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/dwara/dwara/gateway/proxy"
)

// The net/http front's request-head validation. Go's HTTP/1 server repairs
// what it accepts and leaves no trace of it in the request it hands to
// ServeHTTP: obsolete line folding is joined into the value, bare LF line
// ends are taken as CRLF, a Content-Length beside Transfer-Encoding is
// deleted (and the connection kept), two equal Content-Length fields are
// merged, and a request head may be 1 MiB. Nothing in ServeHTTP can tell
// such a request from a clean one, so the check is made on the bytes,
// under the server: HeadCheckListener wraps each connection in a headConn,
// which reads ahead of the server, holds each request head back until it
// is whole and checked (CheckHead, the one every front uses), and follows
// the body's framing (Content-Length, or chunked to its last chunk and
// trailer section) to know where the next head begins.
//
// A head that fails the check, or is over MaxHeadBytes, never reaches the
// server: in its place the server reads a request line it refuses, and the
// plain-text 400 it writes for that is replaced, on the way out, with the
// problem+json answer that says what was wrong (431 for a head too large);
// the server then closes the connection. A body whose chunked framing is
// broken, or whose trailer section has a field that is not a token or
// that a trailer must not carry (badTrailer: framing, routing and the
// other fields RFC 9110 section 6.5.1 keeps out of trailers), is cut
// there the same way: the server's body reader fails, ServeHTTP answers
// 400 (the request body could not be read) and closes the connection, and
// the endpoint never gets the end of that request.
//
// After a request that asks to switch protocols (other than to h2c, which
// is not an upgrade: isUpgrade), nothing more is read until the server
// writes its answer: after a 101 the bytes pass unchecked both ways (the
// connection carries another protocol), after any other answer the
// connection ends, as if the client had closed it. While such a request is
// served, its client going away is not noticed before the endpoint
// answers. TLS connections of the net/http
// front (ServeTLS, HTTP/2) are not wrapped: the server must see them as
// *tls.Conn; on them Go's parser and ServeHTTP's checks apply.

// MaxHeadBytes bounds a request head on the net/http front
// (HeadCheckListener), as the fasthttp front's read buffer
// (NewServer's ReadBufferSize) bounds its own: 431 over it. A net/http server of the proxy sets it as its
// MaxHeaderBytes too, for the connections HeadCheckListener does not see
// (TLS, HTTP/2).
const MaxHeadBytes = 16 << 10

// HeadCheckListener wraps ln, whose connections a net/http server serves
// with the Proxy as plain HTTP/1.1 (not TLS), so that each request head is
// checked as it came on the wire before the server parses it (see the
// comment above). It is safe for concurrent use as ln is.
func HeadCheckListener(ln net.Listener) net.Listener { return headListener{ln} }

type headListener struct{ net.Listener }

func (l headListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newHeadConn(c), nil
}

// States of a headConn's reading.
const (
	hsHead      = iota // gathering a request head
	hsBody             // n bytes of a Content-Length body left
	hsChunkSize        // gathering a chunk-size line
	hsChunkData        // n bytes of a chunk's data left
	hsChunkEnd         // gathering the CRLF after a chunk's data
	hsTrailer          // gathering the trailer section's lines
	hsUpgrade          // after an upgrade request: waiting for its answer
	hsTunnel           // after a 101: nothing checked
	hsRefused          // out is the stand-in for a refused head or body
	hsDone             // nothing more is read
)

// standIn is what the server reads instead of a refused head or the rest
// of a refused body: a line its parsers refuse, whatever they expected.
const standIn = "\x00 / HTTP/1.1\r\n\r\n"

// headConn is a client connection that its server reads through the
// head check. Read is called by one goroutine at a time (the server's),
// Write concurrently with it.
type headConn struct {
	net.Conn
	buf [4 << 10]byte
	in  []byte // read, not looked at yet (in buf)
	acc []byte // the head or line being gathered
	st  int
	n   int64 // hsBody, hsChunkData: bytes left
	// upgrade: the request being read asks to switch protocols; hsUpgrade
	// follows it.
	upgrade bool
	// lineStart is where in acc the line being gathered begins.
	lineStart int

	mu sync.Mutex
	// out is what the server reads next: checked bytes (of buf or acc, or
	// the stand-in). Read only looks further once it is empty.
	out []byte
	// answer, once a head is refused, is the answer to write in place of
	// the server's own; written once the server read the stand-in.
	answer   []byte
	answered bool
}

func newHeadConn(c net.Conn) *headConn {
	return &headConn{Conn: c, acc: make([]byte, 0, 1024)}
}

// Read gives the server the checked bytes: the next request head once it
// is whole and checked, the body as its framing goes.
func (c *headConn) Read(p []byte) (int, error) {
	for {
		c.mu.Lock()
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			c.mu.Unlock()
			return n, nil
		}
		st := c.st
		c.mu.Unlock()
		switch {
		case st == hsRefused || st == hsDone:
			c.setState(hsDone)
			return 0, io.EOF
		case st == hsTunnel && len(c.in) == 0:
			return c.Conn.Read(p)
		case st == hsUpgrade:
			// Only the server's look at whether the client is still there
			// reads now (it takes nothing when nothing comes).
			return 0, nil
		}
		if len(c.in) == 0 {
			// What was gathered stays gathered: a read that ends with an
			// error (the server's deadline, which it also sets to take a
			// background read back) loses nothing.
			n, err := c.Conn.Read(c.buf[:])
			if n == 0 {
				if err == nil {
					err = io.ErrNoProgress
				}
				return 0, err
			}
			c.in = c.buf[:n]
		}
		c.step()
	}
}

func (c *headConn) setState(st int) {
	c.mu.Lock()
	c.st = st
	c.mu.Unlock()
}

// emit makes b, checked, the next bytes the server reads, and st the
// state after them.
func (c *headConn) emit(b []byte, st int) {
	c.mu.Lock()
	c.out, c.st = b, st
	c.mu.Unlock()
}

// step looks at what c.in holds in the current state, and emits what it
// checked, if anything.
func (c *headConn) step() {
	switch c.st {
	case hsTunnel:
		c.emit(c.in, hsTunnel)
		c.in = nil
		return
	case hsBody, hsChunkData:
		k := int(min(int64(len(c.in)), c.n))
		b := c.in[:k]
		c.in = c.in[k:]
		c.n -= int64(k)
		next := c.st
		if c.n == 0 {
			next = c.afterRequest()
			if c.st == hsChunkData {
				next = hsChunkEnd
			}
		}
		c.emit(b, next)
		return
	}
	// A line to gather: the head's, a chunk size's, the CRLF after a
	// chunk, a trailer field's.
	i := bytes.IndexByte(c.in, '\n')
	if i < 0 {
		c.acc = append(c.acc, c.in...)
		c.in = nil
		if len(c.acc) > MaxHeadBytes {
			c.tooLarge()
		}
		return
	}
	c.acc = append(c.acc, c.in[:i+1]...)
	c.in = c.in[i+1:]
	if len(c.acc) > MaxHeadBytes {
		c.tooLarge()
		return
	}
	start := c.lineStart // the line may have come in pieces
	line := c.acc[start:]
	c.lineStart = len(c.acc)
	if c.st != hsHead {
		c.lineStart = 0 // acc holds one line at a time
	}
	switch c.st {
	case hsHead:
		c.headLine(start, line)
	case hsChunkSize:
		c.acc = c.acc[:0]
		n, ok := chunkSize(line)
		switch {
		case !ok:
			c.cutBody(line)
		case n == 0:
			c.emit(line, hsTrailer)
		default:
			c.n = n
			c.emit(line, hsChunkData)
		}
	case hsChunkEnd:
		c.acc = c.acc[:0]
		if string(line) != "\r\n" {
			c.cutBody(line)
			return
		}
		c.emit(line, hsChunkSize)
	case hsTrailer:
		c.acc = c.acc[:0]
		if string(line) == "\r\n" {
			c.emit(line, c.afterRequest())
			return
		}
		if !goodTrailer(line) {
			c.cutBody(line)
			return
		}
		c.emit(line, hsTrailer)
	}
}

// headLine takes the head's line that begins at start in c.acc.
func (c *headConn) headLine(start int, line []byte) {
	empty := string(line) == "\r\n" || string(line) == "\n"
	if start == 0 {
		if empty {
			c.acc, c.lineStart = c.acc[:0], 0 // an empty line before a request line is skipped
			return
		}
		// The request line is checked as soon as it is in, so that an
		// HTTP/0.9 line (which has no head to wait for) is answered at
		// once.
		if len(line) < 2 || line[len(line)-2] != '\r' {
			c.refuse(http.StatusBadRequest, "the request line ends with a bare LF")
			return
		}
		if why := proxy.CheckRequestLine(line[:len(line)-2]); why != "" {
			c.refuse(http.StatusBadRequest, why)
			return
		}
		return
	}
	if !empty {
		return
	}
	head := c.acc
	f, why := proxy.CheckHead(head)
	if why != "" {
		c.refuse(http.StatusBadRequest, why)
		return
	}
	// The server reads the head from acc; the next line is gathered only
	// once it has (out is empty), so acc is reused.
	c.acc, c.lineStart = c.acc[:0], 0
	c.upgrade = f.Upgrade && !proxy.IsH2CUpgrade(headerValue(head, "Upgrade"))
	next := c.afterRequest()
	switch {
	case f.Chunked:
		next = hsChunkSize
	case f.ContentLength > 0:
		next, c.n = hsBody, f.ContentLength
	}
	c.emit(head, next)
}

// afterRequest is the state once the request being read is all in.
func (c *headConn) afterRequest() int {
	if c.upgrade {
		return hsUpgrade
	}
	return hsHead
}

// refuse gives the server the stand-in instead of the head gathered, and
// keeps the answer that replaces the server's.
func (c *headConn) refuse(status int, detail string) {
	title := "Bad request head"
	if status == http.StatusRequestHeaderFieldsTooLarge {
		title = "Request header too large"
	}
	body := proxy.ProblemJSON(status, title, detail)
	answer := "HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) +
		"\r\nContent-Type: application/problem+json\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	c.acc, c.in, c.lineStart = nil, nil, 0
	c.mu.Lock()
	c.out, c.st, c.answer = []byte(standIn), hsRefused, []byte(answer)
	c.mu.Unlock()
}

func (c *headConn) tooLarge() {
	if c.st == hsHead {
		c.refuse(http.StatusRequestHeaderFieldsTooLarge, "the request head is larger than the gateway reads")
		return
	}
	c.cutBody(c.acc) // a chunk-size or trailer line that long
}

// cutBody gives the server's body reader the stand-in, which it refuses,
// instead of the rest of a body whose framing or trailer is refused; the
// connection is read no further.
func (c *headConn) cutBody(pending []byte) {
	c.acc, c.in, c.lineStart = nil, nil, 0
	c.emit([]byte(standIn), hsRefused)
}

// Write writes p, but for the server's own answer to the stand-in of a
// refused head, which the answer that says what was wrong replaces. The
// first write after an upgrade request (its answer's head) decides what
// follows: a tunnel after 101, else the end of the connection.
func (c *headConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	replace := c.answer != nil && !c.answered && len(c.out) == 0 && (c.st == hsRefused || c.st == hsDone)
	if replace {
		c.answered = true
	}
	if c.st == hsUpgrade {
		switch {
		case bytes.HasPrefix(p, []byte("HTTP/1.1 101 ")):
			c.st = hsTunnel
		default:
			c.st = hsDone
		}
	}
	answer := c.answer
	c.mu.Unlock()
	if !replace {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(answer); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite half-closes the connection when it can: the server does so
// before it closes a connection after an error answer, so that the client
// reads the answer instead of a reset.
func (c *headConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Unwrap returns the connection, for the checks that look at the socket.
func (c *headConn) Unwrap() net.Conn { return c.Conn }

// maxChunkDigits is the most hex digits a request's chunk size may have,
// leading zeros included: fasthttp's parser takes no more (RFC 9112 allows
// any number), so every front refuses alike what the fasthttp front
// must (a 17-digit "00000000000000005" is a 400 everywhere).
const maxChunkDigits = 15

// chunkSize parses a chunk-size line (RFC 9112 section 7.1: hex digits,
// at most maxChunkDigits, then optional extensions, then CRLF).
func chunkSize(line []byte) (int64, bool) {
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, false
	}
	n, digits, ok := proxy.ChunkSizeLine(line[:len(line)-2])
	return n, ok && digits <= maxChunkDigits
}

// goodTrailer reports whether line (with its CRLF) is a trailer field
// that may be passed on.
func goodTrailer(line []byte) bool {
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return false
	}
	name, _, fault := proxy.SplitField(line[:len(line)-2])
	return fault == proxy.FieldOK && !badTrailer(name)
}

// badTrailer reports whether a trailer field must not be passed on: the
// framing, routing, connection, authentication and control fields, and
// those that say how to process the content (RFC 9110 section 6.5.1):
// the list the fasthttp front's parser refuses, so that the fronts agree.
func badTrailer(name []byte) bool {
	for _, k := range [...]string{
		"Authorization", "Connection", "Content-Encoding", "Content-Length", "Content-Range",
		"Content-Type", "Cookie", "Expect", "Host", "Keep-Alive", "Location", "Max-Forwards",
		"Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Range", "Set-Cookie",
		"TE", "Trailer", "Transfer-Encoding", "WWW-Authenticate",
	} {
		if proxy.EqualFoldASCII(name, k) {
			return true
		}
	}
	return false
}

// headerValue returns the value of the first field name in a checked
// head, without the surrounding whitespace.
func headerValue(head []byte, name string) string {
	_, rest, _ := bytes.Cut(head, []byte("\r\n"))
	for len(rest) > 0 {
		line, r, _ := bytes.Cut(rest, []byte("\r\n"))
		rest = r
		k, v, ok := bytes.Cut(line, []byte{':'})
		if ok && proxy.EqualFoldASCII(k, name) {
			return string(proxy.TrimOWS(v))
		}
	}
	return ""
}
