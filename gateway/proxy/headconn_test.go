package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// netHTTPGateway serves a new proxy to addr with the net/http front
// (HeadCheckListener under it, as node serves it) and returns its address.
func netHTTPGateway(t *testing.T, addr string) string {
	t.Helper()
	p := New(Options{})
	t.Cleanup(p.Close)
	if err := p.Apply(mustParse(t, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr)), 1); err != nil {
		t.Fatal(err)
	}
	return serveNetHTTP(t, p, nil)
}

// TestNetHTTPFrontRefusals: what Go's HTTP server repairs and passes on
// (obsolete line folding, bare LF, Content-Length beside
// Transfer-Encoding, equal Content-Length fields, a 1 MiB head) is refused
// on the net/http front by the head check under it, with the
// problem+json answer every front gives, naming what is wrong, and the
// connection closed; a refused trailer cuts the request before its end.
// A bad request pipelined behind a good one is refused after the good
// one's answer.
func TestNetHTTPFrontRefusals(t *testing.T) {
	t.Parallel()
	up := startRawRecorder(t)
	addr := netHTTPGateway(t, up.addr)
	good := "GET /good HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, tc := range []struct {
		name, in string
		// codes are the statuses of the answers; detail is part of the last
		// one's detail.
		codes  []int
		detail string
	}{
		{"obsolete line folding", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", []int{400}, "folding"},
		{"bare LF", "GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n", []int{400}, "bare LF"},
		{"bare LF ending the request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", []int{400}, "bare LF"},
		{"HTTP/0.9", "GET /\r\n", []int{400}, "no HTTP version"},
		{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []int{400}, "both"},
		{"equal Content-Length fields", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", []int{400}, "more than one Content-Length"},
		{"Host with userinfo", "GET / HTTP/1.1\r\nHost: user@evil.example\r\n\r\n", []int{400}, "Host"},
		{"field name with a space", "GET / HTTP/1.1\r\nHost: a\r\nX A: b\r\n\r\n", []int{400}, "not a token"},
		{"head over the limit", "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", MaxHeadBytes) + "\r\n\r\n", []int{431}, "larger"},
		{"pipelined behind a good request", good + "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", []int{200, 400}, "folding"},
		{"Content-Length trailer", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nContent-Length: 9\r\n\r\n", []int{400}, "request body"},
		{"broken chunk framing", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxyz\r\n0\r\n\r\n", []int{400}, "request body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.count()
			out, closed := exchangeRaw(t, addr, []byte(tc.in+good), true, conformanceDeadline)
			if !closed {
				t.Errorf("the connection stayed open")
			}
			br := bufio.NewReader(bytes.NewReader(out))
			for i, code := range tc.codes {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("answer %d: %v (got %q)", i, err, out)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != code {
					t.Fatalf("answer %d: %d %s; want %d", i, resp.StatusCode, body, code)
				}
				if i < len(tc.codes)-1 {
					continue
				}
				var problem struct{ Detail string }
				if resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &problem) != nil ||
					!strings.Contains(problem.Detail, tc.detail) {
					t.Errorf("answer %d: %s %s; want problem+json whose detail says %q", i, resp.Header.Get("Content-Type"), body, tc.detail)
				}
			}
			if rest, _ := io.ReadAll(br); len(rest) > 0 {
				t.Errorf("more after the refusal: %q", rest)
			}
			for _, r := range up.since(before) {
				if r.complete && r.target != "/good" {
					t.Errorf("the endpoint got %s", r.normal)
				}
			}
		})
	}
}

// TestNetHTTPFrontUpgradeNotSwitched: after an upgrade request the head
// check reads nothing more until the answer; an answer other than 101 is
// relayed and the connection then closed, so no request after it goes
// unchecked.
func TestNetHTTPFrontUpgradeNotSwitched(t *testing.T) {
	t.Parallel()
	up := startRawRecorder(t) // answers 200 to the upgrade request
	addr := netHTTPGateway(t, up.addr)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(conformanceDeadline))
	if _, err := io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"+
		"GET /after HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(c)
	if codes := statuses(out); fmt.Sprint(codes) != "[200]" {
		t.Errorf("answers %v (%q); want the upgrade request's 200 alone, then the connection closed", codes, out)
	}
	for _, r := range up.since(0) {
		if r.target != "/ws" {
			t.Errorf("the endpoint got %s", r.normal)
		}
	}
}
