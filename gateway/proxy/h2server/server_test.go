package h2server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// TestMain fails the package when a connection, a handler or a worker of
// a closed server is left running after the tests ended.
func TestMain(m *testing.M) {
	testrun.Main(m)
}

// testServer is a Server serving the connections of a listener on
// 127.0.0.1; conns counts the connections it was handed.
type testServer struct {
	srv   *Server
	addr  string
	conns atomic.Int32
}

// startServer serves srv on a new listener of 127.0.0.1 until the test
// ends, then closes the listener and the server. It sets srv's
// ConnContext to count the connections.
func startServer(t *testing.T, srv *Server) *testServer {
	t.Helper()
	ts := &testServer{srv: srv}
	connContext := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		ts.conns.Add(1)
		if connContext != nil {
			return connContext(ctx, nc)
		}
		return ctx
	}
	ts.addr = serveOn(t, srv, nil)
	return ts
}

// serveOn serves srv, until the test ends, on a new listener of
// 127.0.0.1 whose connections wrap wraps (nil: none), and returns its
// address. At the end Serve must return nil.
func serveOn(t *testing.T, srv *Server, wrap func(net.Conn) net.Conn) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var serving net.Listener = ln
	if wrap != nil {
		serving = testnet.WrapListener{Listener: ln, Wrap: wrap}
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serving) }()
	t.Cleanup(func() {
		_ = ln.Close()
		_ = srv.Close()
		if err := testrun.Recv(t, served, "Serve's return"); err != nil {
			t.Errorf("Serve returned %v after its listener closed; want nil", err)
		}
	})
	return ln.Addr().String()
}

func (ts *testServer) url(path string) string { return "http://" + ts.addr + path }

// client is an HTTP/2 client of ts over plain TCP (prior knowledge): its
// requests share one connection while the server's stream limit allows.
func (ts *testServer) client(t *testing.T) *http.Client {
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: testrun.Timeout}
}

// release returns a channel that the handlers of a test wait on, closed
// by the returned function or, at the latest, when the test ends.
func release(t *testing.T) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	done := sync.OnceFunc(func() { close(ch) })
	t.Cleanup(done)
	return ch, done
}

// pattern is n deterministic bytes that do not repeat every 256, so that
// a byte out of place changes the body.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) ^ byte(i>>8)*31 ^ byte(i>>16)*7 ^ seed
	}
	return b
}

// frameBound bounds the frames a raw client reads while it looks for one.
const frameBound = 2000

// rawClient speaks HTTP/2 frame by frame to a server: the tests of the
// protocol's rules, which a real client would not break. Its reads are
// bounded by one read deadline, testrun.Timeout after the dial.
type rawClient struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

// dialRaw connects to ts and sends the client's preface and a SETTINGS
// frame with settings.
func (ts *testServer) dialRaw(t *testing.T, settings ...http2.Setting) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetReadDeadline(time.Now().Add(testrun.Timeout))
	rc := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.enc = hpack.NewEncoder(&rc.hbuf)
	if _, err := io.WriteString(nc, clientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return rc
}

// writeHeaders sends a HEADERS frame on stream id with fields, names and
// values in turn.
func (rc *rawClient) writeHeaders(id uint32, end bool, fields ...string) error {
	rc.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(),
		EndStream: end, EndHeaders: true})
}

func (rc *rawClient) headers(id uint32, end bool, fields ...string) {
	rc.t.Helper()
	if err := rc.writeHeaders(id, end, fields...); err != nil {
		rc.t.Fatalf("writing HEADERS of stream %d: %v", id, err)
	}
}

// request opens stream id with a request for path; more fields follow
// the pseudo-fields. With end the request has no body.
func (rc *rawClient) request(id uint32, method, path string, end bool, more ...string) {
	rc.t.Helper()
	rc.headers(id, end, append([]string{":method", method, ":scheme", "http", ":authority", "h2.test",
		":path", path}, more...)...)
}

// read returns the next frame from the server.
func (rc *rawClient) read() http2.Frame {
	rc.t.Helper()
	f, err := rc.fr.ReadFrame()
	if err != nil {
		rc.t.Fatalf("reading a frame: %v", err)
	}
	return f
}

// until reads frames until match takes one, and returns it.
func (rc *rawClient) until(what string, match func(http2.Frame) bool) http2.Frame {
	rc.t.Helper()
	for range frameBound {
		if f := rc.read(); match(f) {
			return f
		}
	}
	rc.t.Fatalf("no %s in %d frames", what, frameBound)
	return nil
}

// headersOf reads frames until a HEADERS frame (with its CONTINUATIONs)
// of stream id comes, and returns it.
func (rc *rawClient) headersOf(what string, id uint32) *http2.MetaHeadersFrame {
	rc.t.Helper()
	return rc.until(what, func(f http2.Frame) bool {
		_, ok := f.(*http2.MetaHeadersFrame)
		return ok && f.Header().StreamID == id
	}).(*http2.MetaHeadersFrame)
}

// handshake reads the server's SETTINGS and the WINDOW_UPDATE that opens
// its connection window, and returns the settings.
func (rc *rawClient) handshake() map[http2.SettingID]uint32 {
	rc.t.Helper()
	settings := map[http2.SettingID]uint32{}
	rc.until("server SETTINGS", func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			return false
		}
		_ = sf.ForeachSetting(func(s http2.Setting) error {
			settings[s.ID] = s.Val
			return nil
		})
		return true
	})
	wu := rc.until("the connection's WINDOW_UPDATE", func(f http2.Frame) bool {
		wu, ok := f.(*http2.WindowUpdateFrame)
		return ok && wu.StreamID == 0
	}).(*http2.WindowUpdateFrame)
	if got := 65535 + int64(wu.Increment); got != connWindow {
		rc.t.Fatalf("connection window %d; want %d", got, connWindow)
	}
	return settings
}

// fieldValue is the value of the field name in a response's HEADERS.
func fieldValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestBasics checks the plain answers: a GET gets its status, body, the
// field its handler set and a Date; a 204 and an answer to HEAD end with
// their HEADERS frame, no DATA after it, though their handlers tried to
// write a body.
func TestBasics(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hello":
			w.Header().Set("X-Handler", "set")
			_, _ = io.WriteString(w, "hello, "+r.Method)
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
			_, _ = io.WriteString(w, "not sent")
		default:
			http.NotFound(w, r)
		}
	})})

	resp, err := ts.client(t).Get(ts.url("/hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || string(body) != "hello, GET" {
		t.Errorf("GET: %d over HTTP/%d, body %q; want 200 over HTTP/2, body %q",
			resp.StatusCode, resp.ProtoMajor, body, "hello, GET")
	}
	if got := resp.Header.Get("X-Handler"); got != "set" {
		t.Errorf("X-Handler %q; want the handler's %q", got, "set")
	}
	if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
		t.Errorf("Date %q: %v; want an HTTP date", resp.Header.Get("Date"), err)
	}

	rc := ts.dialRaw(t)
	rc.request(1, http.MethodHead, "/hello", true)
	rc.request(3, http.MethodGet, "/empty", true)
	answers := map[uint32]*http2.MetaHeadersFrame{}
	rc.until("the answers of streams 1 and 3", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if !f.StreamEnded() {
				t.Errorf("HEADERS of stream %d (%s) without END_STREAM; want the answer to end with them",
					f.StreamID, f.PseudoValue("status"))
			}
			answers[f.StreamID] = f
		case *http2.DataFrame:
			t.Errorf("DATA of %d bytes on stream %d; want no body", len(f.Data()), f.StreamID)
		case *http2.RSTStreamFrame:
			t.Fatalf("RST_STREAM %v on stream %d; want an answer", f.ErrCode, f.StreamID)
		}
		return len(answers) == 2
	})
	if h := answers[1]; h.PseudoValue("status") != "200" || fieldValue(h, "x-handler") != "set" {
		t.Errorf("HEAD: status %q, x-handler %q; want 200 and %q", h.PseudoValue("status"), fieldValue(h, "x-handler"), "set")
	}
	if h := answers[3]; h.PseudoValue("status") != "204" || fieldValue(h, "date") == "" {
		t.Errorf("204: status %q, date %q; want 204 with a date", h.PseudoValue("status"), fieldValue(h, "date"))
	}
}

// TestHeaderMapsStartEmpty: the header maps of requests and answers,
// given back after each handler and reused, start empty: over 50
// requests on one connection, each with a field of its own and an answer
// field of its own, no handler sees another request's field and no
// answer carries another answer's.
func TestHeaderMapsStartEmpty(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(w.Header()) != 0 {
			t.Errorf("request %s: the answer's header starts with %v", r.URL.Path, w.Header())
		}
		for k := range r.Header {
			if strings.HasPrefix(k, "X-Only-") && k != "X-Only-"+r.URL.Path[1:] {
				t.Errorf("request %s sees %s", r.URL.Path, k)
			}
		}
		w.Header().Set("X-Answer-"+r.URL.Path[1:], "1")
	})})
	client := ts.client(t)
	for i := range 50 {
		n := strconv.Itoa(i)
		req, err := http.NewRequest(http.MethodGet, ts.url("/"+n), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Only-"+n, "1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		for k := range resp.Header {
			if strings.HasPrefix(k, "X-Answer-") && k != "X-Answer-"+n {
				t.Errorf("answer %d carries %s", i, k)
			}
		}
	}
	if n := ts.conns.Load(); n != 1 {
		t.Errorf("%d connections; want the 50 requests on one", n)
	}
}

// TestLargeBodies sends bodies larger than the server's stream window
// (1 MiB) and, over two requests on one connection, its connection
// window (4 MiB) both ways: the request arrives whole only if the server
// gives its windows back as its handler reads, and the answer only if it
// waits for the client's WINDOW_UPDATEs.
func TestLargeBodies(t *testing.T) {
	t.Parallel()
	const size = 3 << 20
	reqBody, respBody := pattern(size, 1), pattern(size, 2)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Sha256", hex.EncodeToString(h.Sum(nil)))
		w.Header().Set("X-Length", strconv.FormatInt(n, 10))
		_, _ = w.Write(respBody)
	})})
	c := ts.client(t)
	sum := sha256.Sum256(reqBody)
	for i := range 2 {
		resp, err := c.Post(ts.url("/upload"), "application/octet-stream", bytes.NewReader(reqBody))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatalf("request %d: reading the answer: %v", i, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Sha256"); got != hex.EncodeToString(sum[:]) {
			t.Errorf("request %d: the handler read %s bytes with SHA-256 %s; want %d with %x",
				i, resp.Header.Get("X-Length"), got, size, sum)
		}
		if !bytes.Equal(body, respBody) {
			t.Errorf("request %d: an answer of %d bytes unlike the %d written", i, len(body), size)
		}
	}
	if n := ts.conns.Load(); n != 1 {
		t.Errorf("%d connections; want both requests on one", n)
	}
}

// TestManyStreams runs 200 requests at once on one connection: every
// handler waits until all 200 are running, so the test passes only if
// the server serves that many streams of a connection concurrently, and
// each answer must carry its own request's path.
func TestManyStreams(t *testing.T) {
	t.Parallel()
	const n = 200
	var arrived atomic.Int32
	all := make(chan struct{})
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/warm" {
			if arrived.Add(1) == n {
				close(all)
			}
			select {
			case <-all:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, r.URL.Path)
	})})
	c := ts.client(t)
	// The first answer comes after the server's SETTINGS: from then on
	// the client knows it may open 250 streams, not its default 100.
	resp, err := c.Get(ts.url("/warm"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()

	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			path := fmt.Sprintf("/stream/%d", i)
			resp, err := c.Get(ts.url(path))
			if err != nil {
				t.Errorf("%s: %v", path, err)
				return
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != path {
				t.Errorf("%s: %d %q, %v; want 200 %q", path, resp.StatusCode, body, err, path)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	testrun.Recv(t, done, "the answers of 200 concurrent requests")
	if got := ts.conns.Load(); got != 1 {
		t.Errorf("%d connections; want all the requests on one", got)
	}
}

// TestTrailers checks trailers both ways: those the client sends after
// the request body are in the handler's r.Trailer once it read the body
// to its end; those the handler declared (Trailer) or prefixed with
// http.TrailerPrefix, set after it wrote the body, reach the client's
// resp.Trailer, after a body held whole until the handler returned as
// after one sent before.
func TestTrailers(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo-trailer":
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = fmt.Fprintf(w, "%s|%s", body, r.Trailer.Get("X-Checksum"))
		case "/small", "/large":
			w.Header().Set("Trailer", "X-Sum")
			body := []byte("small body")
			if r.URL.Path == "/large" {
				body = pattern(64<<10, 3)
			}
			_, _ = w.Write(body)
			w.Header().Set("X-Sum", strconv.Itoa(len(body)))
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		}
	})})
	c := ts.client(t)

	t.Run("request", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, ts.url("/echo-trailer"), strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		req.Trailer = http.Header{"X-Checksum": {"c0ffee"}}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || string(body) != "payload|c0ffee" {
			t.Errorf("the handler saw %q (%v); want the body and its trailer, %q", body, err, "payload|c0ffee")
		}
	})
	for _, path := range []string{"/small", "/large"} {
		t.Run("response"+path, func(t *testing.T) {
			resp, err := c.Get(ts.url(path))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := resp.Trailer.Get("X-Sum"), strconv.Itoa(len(body)); got != want {
				t.Errorf("trailer X-Sum %q; want %q", got, want)
			}
			if got := resp.Trailer.Get("X-Late"); got != "late" {
				t.Errorf("trailer X-Late %q; want %q", got, "late")
			}
		})
	}
}

// TestHeaderFixedAtFirstWrite checks net/http's rule for a handler's
// header map: changes after the first Write have no effect, except to the
// declared trailers, which go in the trailers only. A small answer's
// HEADERS frame is written only when its handler returns, and it must
// still carry the header as it was at the first Write: a trailer value
// set after the body (a checksum, gRPC's grpc-status) is not an answer
// field, and a field set late is not sent at all.
func TestHeaderFixedAtFirstWrite(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		_, _ = io.WriteString(w, "small body")
		w.Header().Set("X-Sum", "10")
		w.Header().Set("X-Late", "set after the body")
	})})
	resp, err := ts.client(t).Get(ts.url("/"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if got := resp.Trailer.Get("X-Sum"); got != "10" {
		t.Errorf("trailer X-Sum %q; want %q", got, "10")
	}
	if got := resp.Header.Get("X-Sum"); got != "" {
		t.Errorf("the answer's header has the trailer X-Sum: %q; want it in the trailers only", got)
	}
	if got := resp.Header.Get("X-Late"); got != "" {
		t.Errorf("the answer's header has X-Late %q, set after the first Write; want it absent", got)
	}
}

// TestClientCancelEndsHandlerContext checks that a client giving up on a
// request (RST_STREAM CANCEL) ends the context of its handler, which is
// how a handler learns to stop its work.
func TestClientCancelEndsHandlerContext(t *testing.T) {
	t.Parallel()
	started, ended := make(chan struct{}, 1), make(chan error, 1)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done()
		ended <- r.Context().Err()
	})})
	c := ts.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.url("/wait"), nil)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		answered <- err
	}()
	testrun.Recv(t, started, "the handler's start")
	cancel()
	if err := testrun.Recv(t, ended, "the end of the handler's context"); err == nil {
		t.Error("the handler's context ended without an error")
	}
	if err := testrun.Recv(t, answered, "the client's return"); err == nil {
		t.Error("the cancelled request got an answer; want its error")
	}
}

// TestHandlerPanic checks that a panicking handler costs its own stream
// only: the request fails, the next one on the same connection is
// answered. A panic is logged, but not http.ErrAbortHandler, the panic
// that aborts an answer on purpose.
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	var logged testlog.Buffer
	ts := startServer(t, &Server{
		Log: slog.New(slog.NewTextHandler(&logged, nil)),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/abort":
				panic(http.ErrAbortHandler)
			case "/panic":
				panic("handler test panic")
			}
			_, _ = io.WriteString(w, "ok")
		}),
	})
	c := ts.client(t)
	for _, path := range []string{"/abort", "/ok", "/panic", "/ok"} {
		resp, err := c.Get(ts.url(path))
		if path != "/ok" {
			if err == nil {
				_ = resp.Body.Close()
				t.Fatalf("%s: %d; want the request to fail", path, resp.StatusCode)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s after a panic: %v; want an answer", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Fatalf("%s after a panic: %d %q, %v; want 200 %q", path, resp.StatusCode, body, err, "ok")
		}
	}
	if n := ts.conns.Load(); n != 1 {
		t.Errorf("%d connections; want the panics to leave the connection served", n)
	}
	// The panics are logged before their streams are reset, so before the
	// requests failed.
	log := logged.String()
	if !strings.Contains(log, "handler test panic") {
		t.Errorf("log %q; want the panic", log)
	}
	if n := strings.Count(log, "panicked"); n != 1 {
		t.Errorf("%d panics logged in %q; want 1, ErrAbortHandler's not", n, log)
	}
}

// TestShutdownDrains checks a graceful shutdown: an idle connection is
// told (GOAWAY, NO_ERROR) and closed, a connection made after the
// shutdown began is closed unserved, and Shutdown waits for the stream in
// flight, whose answer arrives whole, before it returns nil.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	proceed, letGo := release(t)
	answer := pattern(32<<10, 4)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-proceed
		_, _ = w.Write(answer)
	})})
	c := ts.client(t)
	idle := ts.dialRaw(t)
	// Once the server acknowledged the SETTINGS it read all the client
	// sent: closing the connection loses nothing.
	idle.until("SETTINGS ACK", func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		return ok && sf.IsAck()
	})

	type result struct {
		status int
		body   []byte
		err    error
	}
	inFlight := make(chan result, 1)
	go func() {
		resp, err := c.Get(ts.url("/slow"))
		if err != nil {
			inFlight <- result{err: err}
			return
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		inFlight <- result{resp.StatusCode, body, err}
	}()
	testrun.Recv(t, started, "the handler's start")

	ctx, cancel := context.WithTimeout(context.Background(), testrun.Timeout)
	defer cancel()
	shutdown := make(chan error, 1)
	go func() { shutdown <- ts.srv.Shutdown(ctx) }()

	goAway := idle.until("GOAWAY", func(f http2.Frame) bool {
		_, ok := f.(*http2.GoAwayFrame)
		return ok
	}).(*http2.GoAwayFrame)
	if goAway.ErrCode != http2.ErrCodeNo {
		t.Errorf("GOAWAY %v; want NO_ERROR", goAway.ErrCode)
	}
	if f, err := idle.fr.ReadFrame(); !errors.Is(err, io.EOF) {
		t.Errorf("the idle connection after GOAWAY: %v, %v; want it closed", f, err)
	}

	// The shutdown began (the GOAWAY says so): a new connection is closed
	// before anything is read or written on it.
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	_ = nc.SetReadDeadline(time.Now().Add(testrun.Timeout))
	if n, err := nc.Read(make([]byte, 64)); n > 0 || err == nil || isTimeout(err) {
		t.Errorf("a connection made during the shutdown: read %d bytes, %v; want it closed unserved", n, err)
	}
	pc, peer := net.Pipe()
	defer func() { _ = peer.Close() }()
	if err := ts.srv.ServeConn(pc); !errors.Is(err, ErrServerClosed) {
		t.Errorf("ServeConn during the shutdown: %v; want ErrServerClosed", err)
	}

	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v while a stream was in flight", err)
	default:
	}
	letGo()
	r := testrun.Recv(t, inFlight, "the answer in flight")
	if r.err != nil || r.status != http.StatusOK || !bytes.Equal(r.body, answer) {
		t.Errorf("the request in flight: %d, %d bytes, %v; want 200 and the %d bytes written",
			r.status, len(r.body), r.err, len(answer))
	}
	if err := testrun.Recv(t, shutdown, "Shutdown's return"); err != nil {
		t.Errorf("Shutdown: %v; want nil", err)
	}
}

// TestRapidReset checks the defence against opening streams and
// resetting them at once (CVE-2023-44487): the reset streams' handlers
// still run, so the server counts them, and once twice its stream limit
// run it ends the connection with GOAWAY ENHANCE_YOUR_CALM. Each stream
// is followed by a PING whose ack shows the server took it; the GOAWAY's
// last stream says where it stopped.
func TestRapidReset(t *testing.T) {
	t.Parallel()
	const limit = 4
	proceed, _ := release(t)
	ts := startServer(t, &Server{MaxConcurrentStreams: limit,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-proceed })})
	rc := ts.dialRaw(t)
	for i := range 10 * limit {
		id := uint32(2*i + 1)
		err := rc.writeHeaders(id, true, ":method", "GET", ":scheme", "http", ":authority", "h2.test", ":path", "/")
		if err == nil {
			err = rc.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		if err == nil {
			err = rc.fr.WritePing(false, [8]byte{byte(i)})
		}
		f := rc.until("the PING's ack or GOAWAY", func(f http2.Frame) bool {
			switch f := f.(type) {
			case *http2.PingFrame:
				return f.IsAck() && f.Data[0] == byte(i)
			case *http2.GoAwayFrame:
				return true
			}
			return false
		})
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v after stream %d; want ENHANCE_YOUR_CALM", ga.ErrCode, id)
			}
			if bound := uint32(2*(2*limit+2) - 1); ga.LastStreamID > bound {
				t.Fatalf("GOAWAY at stream %d; want it by stream %d (%d streams running)", ga.LastStreamID, bound, 2*limit+2)
			}
			return
		}
		if err != nil {
			t.Fatalf("writing stream %d: %v, with no GOAWAY", id, err)
		}
	}
	t.Fatalf("%d streams opened and reset with no GOAWAY; want ENHANCE_YOUR_CALM past %d", 10*limit, 2*limit)
}

// TestRefusedOverLimit checks SETTINGS_MAX_CONCURRENT_STREAMS: the server
// announces its limit, and a stream past it is refused (RST_STREAM
// REFUSED_STREAM, which a client may retry) while the others run on.
func TestRefusedOverLimit(t *testing.T) {
	t.Parallel()
	proceed, _ := release(t)
	ts := startServer(t, &Server{MaxConcurrentStreams: 2,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-proceed })})
	rc := ts.dialRaw(t)
	if got := rc.handshake()[http2.SettingMaxConcurrentStreams]; got != 2 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d; want 2", got)
	}
	for _, id := range []uint32{1, 3, 5} {
		rc.request(id, http.MethodGet, "/", true)
	}
	rst := rc.until("RST_STREAM of stream 5", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.StreamID != 5 {
				t.Fatalf("RST_STREAM %v on stream %d; want streams 1 and 3 to run", f.ErrCode, f.StreamID)
			}
			return true
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v; want stream 5 refused alone", f.ErrCode)
		}
		return false
	}).(*http2.RSTStreamFrame)
	if rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Errorf("stream 5 reset with %v; want REFUSED_STREAM", rst.ErrCode)
	}
}

// TestWriteDeadline checks the handler's write deadline against a client
// that takes nothing (its streams' window is 0): the handler's write
// fails with os.ErrDeadlineExceeded instead of waiting for ever.
func TestWriteDeadline(t *testing.T) {
	t.Parallel()
	failed := make(chan error, 1)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			failed <- fmt.Errorf("SetWriteDeadline: %w", err)
			return
		}
		_, err := w.Write(pattern(10<<10, 5))
		if err == nil {
			err = rc.Flush()
		}
		failed <- err
	})})
	rc := ts.dialRaw(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	rc.request(1, http.MethodGet, "/", true)
	if err := testrun.Recv(t, failed, "the handler's write"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the write past the deadline: %v; want os.ErrDeadlineExceeded", err)
	}
}

// TestWriteDeadlineCutsTheAnswer checks what the client gets of an answer
// whose write failed at the handler's write deadline: the client's
// stream window (4 KiB) takes part of the 10 KiB body, the rest misses
// the deadline, and the handler returns. The answer is incomplete and
// must end with RST_STREAM; ending it with END_STREAM would hand the
// client a truncated body as a whole one.
func TestWriteDeadlineCutsTheAnswer(t *testing.T) {
	t.Parallel()
	const window, size = 4 << 10, 10 << 10
	failed := make(chan error, 1)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := w.Write(pattern(size, 6))
		failed <- err
	})})
	rc := ts.dialRaw(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	rc.request(1, http.MethodGet, "/", true)
	if err := testrun.Recv(t, failed, "the handler's write"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the write past the deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	received := 0
	rc.until("the end of stream 1", func(f http2.Frame) bool {
		if f.Header().StreamID != 1 {
			return false
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			received += len(f.Data())
		case *http2.RSTStreamFrame:
			return true
		}
		if f.Header().Flags.Has(http2.FlagDataEndStream) {
			t.Fatalf("the answer ended with END_STREAM after %d of the %d bytes written; want RST_STREAM",
				received, size)
		}
		return false
	})
}

// TestReadDeadline checks the handler's read deadline on a request body
// that does not come: the read fails with os.ErrDeadlineExceeded.
func TestReadDeadline(t *testing.T) {
	t.Parallel()
	failed := make(chan error, 1)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			failed <- fmt.Errorf("SetReadDeadline: %w", err)
			return
		}
		_, err := r.Body.Read(make([]byte, 64))
		failed <- err
	})})
	rc := ts.dialRaw(t)
	rc.request(1, http.MethodPost, "/", false)
	if err := testrun.Recv(t, failed, "the handler's read"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the read past the deadline: %v; want os.ErrDeadlineExceeded", err)
	}
}

// TestHeaderListTooLarge checks MaxHeaderListSize: a request whose
// fields add up to more than it is answered 431, and the connection
// serves the next request. (The fields are each below the limit and the
// block below twice it: past those the framer ends the connection
// instead.)
func TestHeaderListTooLarge(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &Server{MaxHeaderListSize: 1024,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })})
	rc := ts.dialRaw(t)
	big := strings.Repeat("a", 600)
	rc.request(1, http.MethodGet, "/", true, "x-big-1", big, "x-big-2", big, "x-big-3", big)
	rc.request(3, http.MethodGet, "/", true)
	status := map[uint32]string{}
	rc.until("the answers of streams 1 and 3", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			status[f.StreamID] = f.PseudoValue("status")
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v; want the request answered", f.ErrCode)
		}
		return len(status) == 2
	})
	if status[1] != "431" {
		t.Errorf("the request with %d bytes of fields: status %q; want 431", 3*len(big), status[1])
	}
	if status[3] != "200" {
		t.Errorf("the request after it: status %q; want 200", status[3])
	}
}

// TestIdleTimeout checks IdleTimeout: once its only request is answered,
// a connection left idle is told GOAWAY NO_ERROR, naming the last stream
// served, and closed.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &Server{IdleTimeout: 100 * time.Millisecond,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })})
	rc := ts.dialRaw(t)
	rc.request(1, http.MethodGet, "/", true)
	rc.until("the end of stream 1's answer", func(f http2.Frame) bool {
		if _, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatal("GOAWAY before the answer")
		}
		return f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream)
	})
	ga := rc.until("GOAWAY", func(f http2.Frame) bool {
		_, ok := f.(*http2.GoAwayFrame)
		return ok
	}).(*http2.GoAwayFrame)
	if ga.ErrCode != http2.ErrCodeNo || ga.LastStreamID != 1 {
		t.Errorf("GOAWAY %v, last stream %d; want NO_ERROR, 1", ga.ErrCode, ga.LastStreamID)
	}
	if f, err := rc.fr.ReadFrame(); !errors.Is(err, io.EOF) {
		t.Errorf("after GOAWAY: %v, %v; want the connection closed", f, err)
	}
}

// TestMalformedRequests checks that requests RFC 9113 (section 8.2)
// calls malformed are reset with PROTOCOL_ERROR, each on its own stream,
// and the connection serves the next request: a connection-specific
// field, an upper-case field name, TE other than "trailers".
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })})
	rc := ts.dialRaw(t)
	malformed := map[uint32][]string{
		1: {"connection", "keep-alive"},
		3: {"X-Upper", "case"},
		5: {"te", "gzip"},
	}
	for _, id := range []uint32{1, 3, 5} {
		rc.request(id, http.MethodGet, "/", true, malformed[id]...)
	}
	rc.request(7, http.MethodGet, "/", true)
	resets := map[uint32]http2.ErrCode{}
	answer := rc.until("the answer of stream 7", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			resets[f.StreamID] = f.ErrCode
		case *http2.MetaHeadersFrame:
			if f.StreamID != 7 {
				t.Errorf("stream %d answered %s; want it reset", f.StreamID, f.PseudoValue("status"))
			}
			return f.StreamID == 7
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v; want the malformed requests reset alone", f.ErrCode)
		}
		return false
	}).(*http2.MetaHeadersFrame)
	for _, id := range []uint32{1, 3, 5} {
		if code, ok := resets[id]; !ok || code != http2.ErrCodeProtocol {
			t.Errorf("stream %d with %q: reset %v (%v); want PROTOCOL_ERROR before the next answer",
				id, malformed[id], code, ok)
		}
	}
	if s := answer.PseudoValue("status"); s != "200" {
		t.Errorf("the valid request after them: status %q; want 200", s)
	}
}

// TestConnectionWindowBoundsUnreadBodies checks the connection's receive
// window, which bounds the request bodies one connection makes the
// server hold unread (4 MiB): a client that sends more than it on
// streams whose handlers read nothing breaks flow control, and must get
// FLOW_CONTROL_ERROR (on the stream, or for the connection) instead of
// having the server buffer it. Each stream gets no more than its own
// window, so only the connection's is broken.
func TestConnectionWindowBoundsUnreadBodies(t *testing.T) {
	t.Parallel()
	proceed, _ := release(t)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-proceed })})
	rc := ts.dialRaw(t)
	settings := rc.handshake()
	perStream := int(settings[http2.SettingInitialWindowSize])
	frame := int(settings[http2.SettingMaxFrameSize])
	if perStream == 0 || frame == 0 {
		t.Fatalf("SETTINGS %v; want the initial window and the frame size", settings)
	}
	credit := connWindow // what the server's SETTINGS and WINDOW_UPDATE allow
	streams := credit/perStream + 1
	chunk := make([]byte, frame)
	sent := 0
send:
	for i := range streams {
		id := uint32(2*i + 1)
		if err := rc.writeHeaders(id, false, ":method", "POST", ":scheme", "http", ":authority", "h2.test",
			":path", "/"); err != nil {
			break
		}
		for range perStream / frame {
			if err := rc.fr.WriteData(id, false, chunk); err != nil {
				break send
			}
			sent += frame
		}
	}
	_ = rc.fr.WritePing(false, [8]byte{'w', 'i', 'n', 'd', 'o', 'w'})
	f := rc.until("the PING's ack or FLOW_CONTROL_ERROR", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				credit += int(f.Increment)
			}
		case *http2.RSTStreamFrame:
			return f.ErrCode == http2.ErrCodeFlowControl
		case *http2.GoAwayFrame:
			return true
		case *http2.PingFrame:
			return f.IsAck()
		}
		return false
	})
	switch f := f.(type) {
	case *http2.RSTStreamFrame:
		return
	case *http2.GoAwayFrame:
		if f.ErrCode != http2.ErrCodeFlowControl {
			t.Fatalf("GOAWAY %v; want FLOW_CONTROL_ERROR", f.ErrCode)
		}
		return
	}
	if sent <= credit {
		t.Fatalf("%d bytes sent within a connection window of %d: the test proves nothing", sent, credit)
	}
	t.Errorf("the server took %d bytes of DATA, unread, against a connection window of %d, with no FLOW_CONTROL_ERROR",
		sent, credit)
}

// TestPaddingReturnsStreamWindow checks that a stream's padding is given
// back to its window as well as the connection's: padding counts against
// both (RFC 9113, section 6.1) and no handler ever reads it. The client
// spends its whole stream window on padded frames of one byte each;
// once the handler has read those bytes, a PING's ack comes after every
// WINDOW_UPDATE the server made for them, and by then the stream must
// have window to send more.
func TestPaddingReturnsStreamWindow(t *testing.T) {
	t.Parallel()
	const frameLen = 256 // the pad length byte, one byte of data, 254 of padding
	const want = streamWindow / frameLen
	readAll := make(chan struct{}, 1)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 1024)
		n := 0
		for n < want {
			m, err := r.Body.Read(buf)
			n += m
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		readAll <- struct{}{}
		m, _ := io.Copy(io.Discard, r.Body)
		_, _ = fmt.Fprint(w, n+int(m))
	})})
	rc := ts.dialRaw(t)
	if window := rc.handshake()[http2.SettingInitialWindowSize]; window != streamWindow {
		t.Fatalf("stream window %d; want %d", window, streamWindow)
	}
	rc.request(1, http.MethodPost, "/", false)
	pad := make([]byte, frameLen-2)
	for i := range want {
		if err := rc.fr.WriteDataPadded(1, false, []byte{byte(i)}, pad); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	testrun.Recv(t, readAll, "the handler's read of the data")
	if err := rc.fr.WritePing(false, [8]byte{'p', 'a', 'd'}); err != nil {
		t.Fatal(err)
	}
	credit := 0
	rc.until("the PING's ack", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			if f.StreamID == 1 {
				credit += int(f.Increment)
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("RST_STREAM %v on stream %d; want the padded body taken", f.ErrCode, f.StreamID)
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v; want the padded body taken", f.ErrCode)
		case *http2.PingFrame:
			return f.IsAck()
		}
		return false
	})
	if credit == 0 {
		t.Fatalf("stream window 0 after %d bytes of padding and %d of data, all consumed: "+
			"the padding was not given back to the stream, which can send nothing more",
			want*(frameLen-2), want)
	}
	if err := rc.fr.WriteData(1, true, nil); err != nil {
		t.Fatal(err)
	}
	h := rc.headersOf("the answer of stream 1", 1)
	if s := h.PseudoValue("status"); s != "200" {
		t.Errorf("status %q; want 200", s)
	}
}

// TestExpectContinue checks the interim answer to Expect: 100-continue.
// A handler that reads the body before answering makes the server send
// 100 Continue first, which is the client's go-ahead for the body. A
// handler that answers before it reads must not: a 100 after the final
// HEADERS is no interim answer (RFC 9110, section 15.2; RFC 9113,
// section 8.1 allows 1xx only before the final one), and a client takes
// HEADERS after the final ones for trailers.
func TestExpectContinue(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/answer-first" {
			w.WriteHeader(http.StatusOK)
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = fmt.Fprintf(w, "got %d bytes", len(body))
	})})
	expect := []string{"expect", "100-continue", "content-length", "5"}

	t.Run("read first", func(t *testing.T) {
		t.Parallel()
		rc := ts.dialRaw(t)
		rc.request(1, http.MethodPost, "/read-first", false, expect...)
		interim := rc.headersOf("an answer on stream 1", 1)
		if s := interim.PseudoValue("status"); s != "100" || interim.StreamEnded() {
			t.Fatalf("first HEADERS: status %q, END_STREAM %v; want 100 Continue before the body is sent",
				s, interim.StreamEnded())
		}
		if err := rc.fr.WriteData(1, true, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		final := rc.headersOf("the final answer on stream 1", 1)
		if s := final.PseudoValue("status"); s != "200" {
			t.Errorf("final status %q; want 200", s)
		}
	})

	t.Run("answer first", func(t *testing.T) {
		t.Parallel()
		rc := ts.dialRaw(t)
		rc.request(1, http.MethodPost, "/answer-first", false, expect...)
		final := rc.headersOf("an answer on stream 1", 1)
		if s := final.PseudoValue("status"); s != "200" {
			t.Fatalf("first HEADERS: status %q; want the handler's 200", s)
		}
		if err := rc.fr.WriteData(1, true, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		rc.until("the end of stream 1", func(f http2.Frame) bool {
			if f.Header().StreamID != 1 {
				return false
			}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				if s := f.PseudoValue("status"); s != "" {
					t.Errorf("HEADERS with status %s after the final 200; want none", s)
				}
			case *http2.RSTStreamFrame:
				t.Fatalf("RST_STREAM %v; want the answer to end", f.ErrCode)
			}
			return f.Header().Flags.Has(http2.FlagDataEndStream)
		})
	})
}
