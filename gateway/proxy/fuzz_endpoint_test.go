package proxy

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzEndpointAnswer feeds, through each front in turn, an arbitrary answer (any framing, extra bytes,
// a close anywhere) from an endpoint to request A, then sends request B,
// which the endpoint answers cleanly with a secret the fuzzer cannot know,
// on whatever endpoint connection the gateway picks: B must get exactly
// its own answer. A pooled connection reused after a dirty answer would
// hand B the fuzzer's bytes instead. The endpoint closes a connection when
// no request comes for 300 ms after an answer, so an answer the gateway
// waits on ends.
func FuzzEndpointAnswer(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + poison,
		"HTTP/1.1 204 No Content\r\n\r\n" + poison,
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 44\r\n\r\n" + poison,
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" + poison,
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\nHTTP/1.1 200",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nto the close",
		"HTTP/1.1 200",
		"",
	} {
		f.Add([]byte(seed))
	}
	var secretBuf [16]byte
	_, _ = rand.Read(secretBuf[:])
	secret := hex.EncodeToString(secretBuf[:])
	var answers sync.Map // "/a/N" -> the fuzzed bytes
	ep := startRawEndpointIdle(f, 300*time.Millisecond, func(r *http.Request, _ int) rawAnswer {
		if strings.HasPrefix(r.URL.Path, "/a/") {
			b, _ := answers.Load(r.URL.Path)
			raw, _ := b.([]byte)
			return rawAnswer{bytes: string(raw)}
		}
		body := secret + ":" + r.URL.Path
		return rawAnswer{bytes: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)}
	})
	gateways := map[string]*gateway{}
	for _, front := range allFronts {
		// The endpoint's idle close ends an answer the gateway waits on; a
		// response-header timeout far above it leaves B's answer, on a busy
		// machine too, no deadline to miss.
		gateways[front] = proxyTo(f, front, 1, ep.addr, "response_header_timeout_ms: 20000")
	}
	var iter atomic.Int64
	f.Fuzz(func(t *testing.T, answer []byte) {
		for _, front := range allFronts {
			g := gateways[front]
			n := iter.Add(1)
			a, b := fmt.Sprintf("/a/%d", n), fmt.Sprintf("/b/%d", n)
			answers.Store(a, answer)
			defer answers.Delete(a)
			// A: whatever comes back, or nothing.
			ca, err := net.Dial("tcp", hostOf(g.URL))
			if err != nil {
				t.Fatal(err)
			}
			_ = ca.SetDeadline(time.Now().Add(conformanceDeadline))
			_, _ = io.WriteString(ca, rawHead("GET "+a+" HTTP/1.1", "Host: a.example"))
			if resp, err := http.ReadResponse(bufio.NewReader(ca), &http.Request{Method: "GET"}); err == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			}
			ca.Close()
			// B: exactly its own answer.
			rc := dialRaw(t, g)
			rc.write(rawHead("GET "+b+" HTTP/1.1", "Host: a.example"))
			resp, body := rc.readFinal("GET")
			if want := secret + ":" + b; resp.StatusCode != 200 || string(body) != want {
				t.Fatalf("%s front: after the answer %q to A, B got %d %q, want 200 with its own answer", front, answer, resp.StatusCode, body)
			}
		}
	})
}
