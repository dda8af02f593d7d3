package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// routeRecorder is a raw HTTP/1.1 endpoint on loopback that records every
// request head it receives (the request-target exactly as sent, and the
// headers the gateway adds) by X-Request-Id, and answers 200 "ok". It
// parses nothing it does not need, so a target a stricter server would
// refuse is recorded too.
type routeRecorder struct {
	ln   net.Listener
	mu   sync.Mutex
	seen map[string]recordedHead
	wg   sync.WaitGroup
}

// recordedHead is one request head as the endpoint received it.
type recordedHead struct {
	target, service, forwardedHost string
}

func startRouteRecorder(t testing.TB) *routeRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &routeRecorder{ln: ln, seen: map[string]recordedHead{}}
	var conns sync.Map
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			r.wg.Go(func() {
				defer conns.Delete(c)
				defer c.Close()
				r.serve(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		r.wg.Wait()
	})
	return r
}

// serve reads request heads (the gateway sends GETs without a body) and
// answers each.
func (r *routeRecorder) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		_, rest, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
		target, _, _ := strings.Cut(rest, " ")
		var rec recordedHead
		id := ""
		for {
			h, err := br.ReadString('\n')
			if err != nil {
				return
			}
			h = strings.TrimRight(h, "\r\n")
			if h == "" {
				break
			}
			k, v, _ := strings.Cut(h, ":")
			v = strings.TrimSpace(v)
			switch textproto.CanonicalMIMEHeaderKey(k) {
			case "X-Request-Id":
				id = v
			case "X-Dwara-Service":
				rec.service = v
			case "X-Forwarded-Host":
				rec.forwardedHost = v
			}
		}
		rec.target = target
		r.mu.Lock()
		r.seen[id] = rec
		r.mu.Unlock()
		if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")); err != nil {
			return
		}
	}
}

// take returns and forgets the request recorded under id.
func (r *routeRecorder) take(id string) (recordedHead, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.seen[id]
	delete(r.seen, id)
	return rec, ok
}

// fuzzServices are the services of FuzzRouteOddPaths by name: base path
// and host. None is on "/", so a path can match nothing (404).
var fuzzServices = map[string]struct{ base, host string }{
	"api":     {"/v1", ""},
	"assets":  {"/static/img", ""},
	"shop":    {"/cart", "shop.example"},
	"encoded": {"/a%2Fb", ""},
	"unicode": {"/ünï", ""},
}

func fuzzRouteSpec(endpoint string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "upstreams:\n  - {name: rec, endpoints: [%q]}\nservices:\n", endpoint)
	for _, name := range []string{"api", "assets", "shop", "encoded", "unicode"} {
		s := fuzzServices[name]
		fmt.Fprintf(&b, "  - {name: %s, base_path: %q, host: %q, upstream: rec}\n", name, s.base, s.host)
	}
	return b.String()
}

// dotSegmentPath reports whether a path has a "." or ".." segment, on "/"
// separators: written apart from hasDotSegment, to check it.
func dotSegmentPath(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// underBase reports whether path is base or below it on a segment
// boundary.
func underBase(path, base string) bool {
	return path == base || strings.HasPrefix(path, strings.TrimSuffix(base, "/")+"/")
}

// requestTarget makes a request-target of s that keeps the request line
// one line: bytes that would end or split it (controls, space, DEL) are
// percent-encoded; everything else, "%", "#", "?", "\" and bytes that are
// not UTF-8 included, is sent as it is.
func requestTarget(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// hostField keeps a Host value one field: control bytes are dropped.
func hostField(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// FuzzRouteOddPaths drives the proxy's routing with odd paths and hosts
// (percent-encoding, dot segments, double slashes, very long paths, bytes
// that are not UTF-8, absolute-form targets, ports and case in Host), two
// ways:
//
//   - the route seam itself, with the input as the request's path: a path
//     with a "." or ".." segment is answered 400, and a routed one is under
//     the matched service's base path (and its host, when it has one);
//   - a whole request on each front of a real loopback gateway with a
//     recording endpoint behind it: nothing panics, the gateway always answers, a request the
//     endpoint receives was answered 200 and its target parses, has no dot
//     segment, decodes to the path the gateway routed and is under the base
//     path of the service named in X-Dwara-Service; a request not forwarded
//     is answered 4xx, and 400 when its path has a dot segment.
func FuzzRouteOddPaths(f *testing.F) {
	for _, s := range [][2]string{
		{"/v1/users", "example.com"},
		{"/v1", "x"},
		{"/v1/../admin", "x"},
		{"/v1/%2e%2e/admin", "x"},
		{"/v1%2f..%2fadmin", "x"},
		{"/v1/%2E/x", "x"},
		{"//v1//x", "x"},
		{"/v1/./x", "x"},
		{"/v1/.../x", "x"},
		{"/V1/x", "x"},
		{"/v1x", "x"},
		{"/cart/items", "SHOP.example:8080"},
		{"/cart/..", "shop.example"},
		{"/cart", "[shop.example]:1"},
		{"/static/img/a.png", "x"},
		{"/static/imgs", "x"},
		{"/\xff\xfe/v1", "x"},
		{"/v1/\xc3\x28", "\xff.example"},
		{"/v1/" + strings.Repeat("a/", 4000), "x"},
		{"/v1/" + strings.Repeat("%2e%2e/", 500), "x"},
		{"http://shop.example/cart/x", "other"},
		{"http://x/v1/../admin", "x"},
		{"HTTP://SHOP.EXAMPLE:80/cart", "x"},
		{"/v1?x=/../", "x"},
		{"/v1#/../", "x"},
		{"*", "x"},
		{"/%", "x"},
		{"/v1/%zz", "x"},
		{"/v1/%00", "x"},
		{"/v1/a b\tc", "x"},
		{"/a%2Fb/c", "x"},
		{"/a%252Fb/c", "x"},
		{"/ünï/x", "x"},
		{"/%C3%BCn%C3%AF/x", "x"},
		{"/v1\\..\\admin", "x"},
		{"", ""},
	} {
		f.Add(s[0], s[1])
	}
	rec := startRouteRecorder(f)
	var panics atomic.Int64
	var lastPanic atomic.Value
	// A panic recovered and logged is counted by the log.
	p := New(Options{Logger: slog.New(&panicLog{n: &panics, last: &lastPanic})})
	if err := p.Apply(mustParse(f, fuzzRouteSpec(rec.ln.Addr().String())), 1); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(p.Close)
	// Every front serves the same proxy, each on its own listener.
	addrs := map[string]string{}
	for _, front := range allFronts {
		switch front {
		case "fasthttp":
			addrs[front] = serveFast(f, p, nil) // a panic there ends the fuzzing process
		default:
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() {
					if v := recover(); v != nil {
						if v != http.ErrAbortHandler {
							panics.Add(1)
							lastPanic.Store(fmt.Sprintf("%v\n%s", v, debug.Stack()))
						}
						panic(v)
					}
				}()
				httpHandler(p).ServeHTTP(w, r)
			}))
			// Panics are caught above; the server's complaints about
			// malformed requests are expected.
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.Start()
			f.Cleanup(srv.Close)
			addrs[front] = srv.Listener.Addr().String()
		}
	}
	var seq atomic.Int64

	// wireRequest sends one request for target and host on a connection of
	// its own to the front at addr.
	wireRequest := func(t *testing.T, front, addr, target, host string) {
		t.Helper()
		tgt, h := requestTarget(target), hostField(host)
		id := fmt.Sprintf("fuzz-%d", seq.Add(1))
		before := panics.Load()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nX-Request-Id: %s\r\nConnection: close\r\n\r\n", tgt, h, id); err != nil {
			t.Fatalf("write the request: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if panics.Load() != before {
			t.Fatalf("%s front: GET %q Host %q: the handler panicked: %v", front, tgt, h, lastPanic.Load())
		}
		if err != nil {
			t.Fatalf("%s front: GET %q Host %q: no answer: %v", front, tgt, h, err)
		}
		resp.Body.Close()

		got, forwarded := rec.take(id)
		routed, perr := url.ParseRequestURI(tgt) // what the gateway parsed, as net/http does
		if !forwarded {
			if resp.StatusCode < 400 || resp.StatusCode > 499 {
				t.Errorf("%s front: GET %q Host %q: not forwarded, answered %d; want 4xx", front, tgt, h, resp.StatusCode)
			}
			if perr == nil && dotSegmentPath(routed.Path) && resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s front: GET %q Host %q: a dot-segment path answered %d, want 400", front, tgt, h, resp.StatusCode)
			}
			return
		}
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s front: GET %q Host %q: forwarded, but answered %d", front, tgt, h, resp.StatusCode)
		}
		u, err := url.ParseRequestURI(got.target)
		if err != nil {
			t.Fatalf("%s front: GET %q Host %q: the endpoint received target %q, which does not parse: %v", front, tgt, h, got.target, err)
		}
		svc, known := fuzzServices[got.service]
		switch {
		case dotSegmentPath(u.Path):
			t.Errorf("%s front: GET %q Host %q: forwarded with a dot segment: the endpoint resolves %q", front, tgt, h, u.Path)
		case !known:
			t.Errorf("%s front: GET %q Host %q: forwarded for service %q, which the generation does not have", front, tgt, h, got.service)
		case !underBase(u.Path, svc.base):
			t.Errorf("%s front: GET %q Host %q: forwarded for service %s (base path %q) as %q (path %q), outside its base path", front, tgt, h, got.service, svc.base, got.target, u.Path)
		case svc.host != "" && !strings.Contains(strings.ToLower(got.forwardedHost), svc.host):
			t.Errorf("%s front: GET %q Host %q: forwarded for service %s of host %q with X-Forwarded-Host %q", front, tgt, h, got.service, svc.host, got.forwardedHost)
		}
		if perr == nil && routed.Path != u.Path {
			t.Errorf("%s front: GET %q Host %q: the gateway routed path %q, the endpoint resolves %q", front, tgt, h, routed.Path, u.Path)
		}
	}

	f.Fuzz(func(t *testing.T, target, host string) {
		// The seam: the input is the request's (decoded) path.
		rt := p.Route(p.table.Load(), &Request{Method: http.MethodGet, Host: host, Path: target, RequestID: "fuzz-seam", ClientIP: "127.0.0.1"})
		switch {
		case dotSegmentPath(target) && rt.Status != http.StatusBadRequest:
			t.Errorf("route(path %q, host %q): status %d, want 400 for a dot segment", target, host, rt.Status)
		case rt.Status == 0:
			name := rt.Target.HdrService[0]
			svc := fuzzServices[name]
			if !underBase(target, svc.base) {
				t.Errorf("route(path %q, host %q) chose service %s, whose base path %q it is not under", target, host, name, svc.base)
			}
			if svc.host != "" && !strings.Contains(strings.ToLower(host), svc.host) {
				t.Errorf("route(path %q, host %q) chose service %s of host %q", target, host, name, svc.host)
			}
		case rt.Status != http.StatusBadRequest && rt.Status != http.StatusNotFound:
			t.Errorf("route(path %q, host %q): status %d %s, want 0, 400 or 404", target, host, rt.Status, rt.Title)
		}

		// The wire: one request on a connection of its own, on each front.
		for _, front := range allFronts {
			wireRequest(t, front, addrs[front], target, host)
		}
	})
}

// panicLog is a slog handler that counts the records whose message begins
// with "panic" (how the proxy logs a panic it recovered), keeping the last.
type panicLog struct {
	n    *atomic.Int64
	last *atomic.Value
}

func (h *panicLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *panicLog) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "panic") {
		h.n.Add(1)
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		h.last.Store(b.String())
	}
	return nil
}

func (h *panicLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *panicLog) WithGroup(string) slog.Handler      { return h }
