package proxy

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// fiveConnection is an answer head with five Connection lines, each naming
// one field of the answer's own: all five are hop-by-hop.
const fiveConnection = "HTTP/1.1 200 OK\r\n" +
	"Connection: X-A\r\nConnection: X-B\r\nConnection: X-C\r\nConnection: X-D\r\nConnection: x-e, keep-alive\r\n" +
	"X-A: 1\r\nX-B: 2\r\nX-C: 3\r\nX-D: 4\r\nX-E: 5\r\nX-Kept: yes\r\nContent-Length: 2\r\n\r\n"

// TestAnswerHeadParse parses answer heads as RFC 9112 frames them, or
// refuses them with the reason.
func TestAnswerHeadParse(t *testing.T) {
	t.Parallel()
	type want struct {
		status  int
		minor   int
		fields  int
		framing Framing
		length  int64
		close   bool
	}
	for _, tc := range []struct {
		name, in string
		head     bool
		want     want
		err      error
	}{
		{name: "length", in: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", want: want{200, 1, 1, BodyLength, 2, false}},
		{name: "no-reason", in: "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", want: want{200, 1, 1, BodyLength, 0, false}},
		{name: "same-lengths", in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3, 3\r\n\r\n", want: want{200, 1, 2, BodyLength, 3, false}},
		{name: "chunked", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", want: want{200, 1, 1, BodyChunked, -1, false}},
		{name: "chunked-last", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", want: want{200, 1, 2, BodyChunked, -1, false}},
		{name: "te-with-length", in: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", want: want{200, 1, 2, BodyChunked, 2, true}},
		{name: "te-not-chunked", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", want: want{200, 1, 1, bodyToClose, -1, true}},
		{name: "to-close", in: "HTTP/1.1 200 OK\r\n\r\n", want: want{200, 1, 0, bodyToClose, -1, true}},
		{name: "204", in: "HTTP/1.1 204 No Content\r\n\r\n", want: want{204, 1, 0, bodyNone, -1, false}},
		{name: "304-length", in: "HTTP/1.1 304 Not Modified\r\nContent-Length: 44\r\n\r\n", want: want{304, 1, 1, bodyNone, 44, false}},
		{name: "head", in: "HTTP/1.1 200 OK\r\nContent-Length: 44\r\n\r\n", head: true, want: want{200, 1, 1, bodyNone, 44, false}},
		{name: "interim", in: "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", want: want{103, 1, 1, bodyNone, -1, false}},
		{name: "http10", in: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", want: want{200, 0, 1, BodyLength, 2, true}},
		{name: "http10-keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\n", want: want{200, 0, 2, BodyLength, 2, false}},
		{name: "close", in: "HTTP/1.1 200 OK\r\nConnection: x, close\r\nContent-Length: 2\r\n\r\n", want: want{200, 1, 2, BodyLength, 2, true}},
		{name: "bare-lf", in: "HTTP/1.1 200 OK\nContent-Length: 2\nX-A:  v \n\n", want: want{200, 1, 2, BodyLength, 2, false}},
		{name: "obs-text", in: "HTTP/1.1 200 OK\r\nX-A: caf\xc3\xa9\t!\r\nContent-Length: 0\r\n\r\n", want: want{200, 1, 2, BodyLength, 0, false}},
		{name: "five-connection", in: fiveConnection, want: want{200, 1, 12, BodyLength, 2, false}},

		{name: "differing-lengths", in: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", err: errAnswerContentLength},
		{name: "differing-list", in: "HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n", err: errAnswerContentLength},
		{name: "length-not-digits", in: "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n", err: errAnswerContentLength},
		{name: "length-empty", in: "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", err: errAnswerContentLength},
		{name: "status-short", in: "HTTP/1.1 20\r\n\r\n", err: errAnswerStatusLine},
		{name: "status-letters", in: "HTTP/1.1 2x0 OK\r\n\r\n", err: errAnswerStatusLine},
		{name: "status-below-100", in: "HTTP/1.1 099 X\r\n\r\n", err: errAnswerStatusLine},
		{name: "version-2", in: "HTTP/2.0 200 OK\r\n\r\n", err: errAnswerStatusLine},
		{name: "no-space-reason", in: "HTTP/1.1 200OK\r\n\r\n", err: errAnswerStatusLine},
		{name: "ctl-in-reason", in: "HTTP/1.1 200 O\x00K\r\n\r\n", err: errAnswerStatusLine},
		{name: "not-http", in: "ICY 200 OK\r\n\r\n", err: errAnswerStatusLine},
		{name: "space-before-colon", in: "HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n", err: errAnswerSpaceColon},
		{name: "name-not-token", in: "HTTP/1.1 200 OK\r\nX A: 1\r\n\r\n", err: errAnswerFieldName},
		{name: "empty-name", in: "HTTP/1.1 200 OK\r\n: 1\r\n\r\n", err: errAnswerFieldName},
		{name: "no-colon", in: "HTTP/1.1 200 OK\r\nX-A\r\n\r\n", err: errAnswerNoColon},
		{name: "nul-in-value", in: "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n", err: errAnswerFieldValue},
		{name: "cr-in-value", in: "HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n", err: errAnswerFieldValue},
		{name: "del-in-value", in: "HTTP/1.1 200 OK\r\nX-A: a\x7fb\r\n\r\n", err: errAnswerFieldValue},
		{name: "obs-fold", in: "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\n\r\n", err: errAnswerObsFold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a AnswerHead
			err := a.parse([]byte(tc.in), tc.head)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{a.Status, a.minor, len(a.Fields), a.Framing, a.Length, a.Close}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestAnswerHeadFields keeps the field lines as they came, values
// trimmed, and the tokens of every Connection line, not just the first.
func TestAnswerHeadFields(t *testing.T) {
	t.Parallel()
	var a AnswerHead
	if err := a.parse([]byte("HTTP/1.1 200 OK\nX-A: \t v w \t\nx-b:\n\n"), false); err != nil {
		t.Fatal(err)
	}
	if len(a.Fields) != 2 || string(a.Fields[0].Name) != "X-A" || string(a.Fields[0].Value) != "v w" ||
		string(a.Fields[1].Name) != "x-b" || string(a.Fields[1].Value) != "" {
		t.Errorf("fields = %q", a.Fields)
	}
	if err := a.parse([]byte(fiveConnection), false); err != nil {
		t.Fatal(err)
	}
	var conn []string
	for _, c := range a.conn {
		conn = append(conn, string(c))
	}
	if want := []string{"X-A", "X-B", "X-C", "X-D", "x-e", "keep-alive"}; !slices.Equal(conn, want) {
		t.Errorf("Connection tokens = %q, want %q", conn, want)
	}
}

// TestReadAnswer reads answers one after another from a connection's
// reader: interim ones skipped (at most eight), a 101 only for an
// upgrade, each body as its head frames it, nothing past its end, and
// the trailers of a chunked one.
func TestReadAnswer(t *testing.T) {
	t.Parallel()
	const stream = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\nLink: </a>\n\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" +
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 42\r\n\r\n" +
		"HTTP/1.1 204 No Content\r\n\r\n" +
		"HTTP/1.1 200 OK\r\n\r\nto the close"
	c := &Conn{Reader: bufio.NewReaderSize(strings.NewReader(stream), ConnBufferSize)}
	for i, want := range []struct {
		status int
		body   string
		close  bool
	}{{200, "hello", false}, {200, "ok", false}, {204, "", false}, {200, "to the close", true}} {
		if err := c.ReadAnswer(nil, false, false); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		var body []byte
		if s := c.AnswerStream(); s != nil {
			var err error
			if body, err = io.ReadAll(s); err != nil {
				t.Fatalf("answer %d: body: %v", i, err)
			}
		}
		if c.Head.Status != want.status || string(body) != want.body || c.Head.Close != want.close {
			t.Errorf("answer %d: %d %q close=%v, want %d %q close=%v", i, c.Head.Status, body, c.Head.Close, want.status, want.body, want.close)
		}
		if i == 1 && (len(c.Head.Trailers) != 1 || string(c.Head.Trailers[0].Value) != "42") {
			t.Errorf("trailers = %q, want X-Sum: 42", c.Head.Trailers)
		}
	}

	interim := strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 9) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	c = &Conn{Reader: bufio.NewReader(strings.NewReader(interim))}
	if err := c.ReadAnswer(nil, false, false); !errors.Is(err, errAnswerTooManyInterim) {
		t.Errorf("nine interim answers: err = %v, want %v", err, errAnswerTooManyInterim)
	}
	const switched = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
	c = &Conn{Reader: bufio.NewReader(strings.NewReader(switched))}
	if err := c.ReadAnswer(nil, false, false); !errors.Is(err, errAnswerUnaskedSwitch) {
		t.Errorf("101 without an upgrade: err = %v, want %v", err, errAnswerUnaskedSwitch)
	}
	c = &Conn{Reader: bufio.NewReader(strings.NewReader(switched))}
	if err := c.ReadAnswer(nil, false, true); err != nil || c.Head.Status != 101 || c.AnswerStream() != nil {
		t.Errorf("101 to an upgrade: %v, status %d", err, c.Head.Status)
	}
	c = &Conn{Reader: bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel"))}
	if err := c.ReadAnswer(nil, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c.AnswerStream()); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut body: err = %v, want %v", err, io.ErrUnexpectedEOF)
	}
}

// TestReadAnswerAllocs: reading an answer allocates nothing once the
// connection's head has grown to its size.
func TestReadAnswerAllocs(t *testing.T) {
	const answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: x\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"
	var r strings.Reader
	c := &Conn{Reader: bufio.NewReaderSize(&r, ConnBufferSize)}
	buf := make([]byte, 64)
	read := func() {
		r.Reset(answer)
		c.Reader.Reset(&r)
		if err := c.ReadAnswer(nil, false, false); err != nil {
			t.Fatal(err)
		}
		if n, _ := io.ReadFull(c.AnswerStream(), buf[:2]); n != 2 {
			t.Fatal("short body")
		}
	}
	read()
	if n := testing.AllocsPerRun(100, read); n != 0 {
		t.Errorf("readAnswer: %v allocations, want 0", n)
	}
}

// TestCopyAnswer copies an answer head on both sinks: no hop-by-hop
// field, none a Connection line names (five lines here), the framing
// left to the front, Trailer announced, the endpoint's X-Request-Id kept
// or the gateway's added, a Set-Cookie the gateway set first.
func TestCopyAnswer(t *testing.T) {
	t.Parallel()
	const in = "HTTP/1.1 201 Created\r\n" +
		"Connection: X-A\r\nConnection: X-B\r\nConnection: X-C\r\nConnection: X-D\r\nConnection: X-E\r\n" +
		"X-A: 1\r\nX-B: 2\r\nX-C: 3\r\nX-D: 4\r\nX-E: 5\r\n" +
		"Keep-Alive: timeout=5\r\nProxy-Connection: x\r\nUpgrade: h2\r\nTe: trailers\r\nTransfer-Encoding: chunked\r\n" +
		"Trailer: X-Sum\r\nSet-Cookie: e=1\r\nX-Kept: yes\r\n\r\n"
	var a AnswerHead
	if err := a.parse([]byte(in), false); err != nil {
		t.Fatal(err)
	}
	gone := []string{"X-A", "X-B", "X-C", "X-D", "X-E", "Connection", "Keep-Alive", "Proxy-Connection", "Upgrade", "Te", "Transfer-Encoding", "Content-Length"}

	t.Run("fasthttp", func(t *testing.T) {
		var out fasthttp.ResponseHeader
		out.Add("Set-Cookie", "g=1")
		CopyAnswer(&a, FastAnswerHook(&out), "rid-1")
		if out.StatusCode() != 201 {
			t.Errorf("status = %d", out.StatusCode())
		}
		for _, k := range gone {
			if v := out.Peek(k); len(v) > 0 {
				t.Errorf("%s: %q copied", k, v)
			}
		}
		if string(out.Peek("X-Kept")) != "yes" || string(out.Peek("X-Request-Id")) != "rid-1" {
			t.Errorf("X-Kept %q, X-Request-Id %q", out.Peek("X-Kept"), out.Peek("X-Request-Id"))
		}
		if keys := out.PeekTrailerKeys(); len(keys) != 1 || string(keys[0]) != "X-Sum" {
			t.Errorf("trailers announced: %q", keys)
		}
		var cookies []string
		for k, v := range out.All() {
			if string(k) == "Set-Cookie" {
				cookies = append(cookies, string(v))
			}
		}
		if !slices.Equal(cookies, []string{"g=1", "e=1"}) {
			t.Errorf("Set-Cookie = %q, want the gateway's first", cookies)
		}
	})

	t.Run("nethttp", func(t *testing.T) {
		rec := httptest.NewRecorder()
		rec.Header()["Set-Cookie"] = []string{"g=1"}
		CopyAnswer(&a, StdAnswerHook(rec), "rid-1")
		h := rec.Result().Header
		if rec.Code != 201 {
			t.Errorf("status = %d", rec.Code)
		}
		for _, k := range gone {
			if v, ok := h[k]; ok {
				t.Errorf("%s: %q copied", k, v)
			}
		}
		if h.Get("X-Kept") != "yes" || h.Get("X-Request-Id") != "rid-1" {
			t.Errorf("X-Kept %q, X-Request-Id %q", h.Get("X-Kept"), h.Get("X-Request-Id"))
		}
		if got := h["Trailer"]; !slices.Equal(got, []string{"X-Sum"}) {
			t.Errorf("Trailer = %q", got)
		}
		if got := h["Set-Cookie"]; !slices.Equal(got, []string{"g=1", "e=1"}) {
			t.Errorf("Set-Cookie = %q, want the gateway's first", got)
		}
	})

	t.Run("endpoint-request-id", func(t *testing.T) {
		var b AnswerHead
		if err := b.parse([]byte("HTTP/1.1 200 OK\r\nx-request-id: theirs\r\n\r\n"), false); err != nil {
			t.Fatal(err)
		}
		var out fasthttp.ResponseHeader
		CopyAnswer(&b, FastAnswerHook(&out), "ours")
		if got := out.PeekAll("X-Request-Id"); len(got) != 1 || string(got[0]) != "theirs" {
			t.Errorf("X-Request-Id = %q, want the endpoint's only", got)
		}
		w := httptest.NewRecorder()
		CopyAnswer(&b, StdAnswerHook(w), "ours")
		if got := w.Header()["X-Request-Id"]; !slices.Equal(got, []string{"theirs"}) {
			t.Errorf("net/http: X-Request-Id = %q, want the endpoint's only", got)
		}
	})
}

// TestAnswerConnectionFields: an endpoint's answer with five Connection
// lines, each naming a field of its own, reaches the client on every
// front without any of the five.
func TestAnswerConnectionFields(t *testing.T) {
	ep := startRawEndpoint(t, func(*http.Request, int) rawAnswer {
		return rawAnswer{bytes: fiveConnection + "ok"}
	})
	eachFront(t, func(t *testing.T, front string) {
		g := proxyTo(t, front, 1, ep.addr, "")
		rc := dialRaw(t, g)
		rc.write(rawHead("GET /five HTTP/1.1", "Host: a.example"))
		resp, body := rc.readFinal("GET")
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("got %d %q, want 200 ok", resp.StatusCode, body)
		}
		for _, k := range []string{"X-A", "X-B", "X-C", "X-D", "X-E"} {
			if v, ok := resp.Header[k]; ok {
				t.Errorf("%s: %q reached the client", k, v)
			}
		}
		if resp.Header.Get("X-Kept") != "yes" {
			t.Errorf("X-Kept = %q, want yes", resp.Header.Get("X-Kept"))
		}
	})
}

// TestAnswerFieldNamesAsWritten: the names of the endpoint's answer
// fields reach the client of the fasthttp fronts as the endpoint wrote
// them, in their case (as nginx and HAProxy pass them); Go's server, the
// net/http front's, writes them in its canonical case. The gateway's own
// X-Request-Id comes with them.
func TestAnswerFieldNamesAsWritten(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["x-lower"] = []string{"1"}
		w.Header()["X-MiXeD-Case"] = []string{"2"}
		_, _ = io.WriteString(w, "ok")
	}))
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		g := proxyTo(t, front, 1, hostOf(up.URL), "")
		rc := dialRaw(t, g)
		rc.write(rawHead("GET / HTTP/1.1", "Host: a.test"))
		var head []string
		for {
			line, err := rc.br.ReadString('\n')
			if err != nil {
				t.Fatalf("read the answer head: %v (so far %q)", err, head)
			}
			if line == "\r\n" {
				break
			}
			head = append(head, strings.TrimRight(line, "\r\n"))
		}
		wants := []string{"x-lower: 1", "X-MiXeD-Case: 2"}
		if front == "net/http" {
			wants = []string{"X-Lower: 1", "X-Mixed-Case: 2"}
		}
		for _, want := range wants {
			if !slices.Contains(head, want) {
				t.Errorf("answer head %q lacks %q", head, want)
			}
		}
		if !slices.ContainsFunc(head, func(l string) bool { return strings.HasPrefix(l, "X-Request-Id: ") }) {
			t.Errorf("answer head %q lacks the gateway's X-Request-Id", head)
		}
	})
}
