package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/gateway/split"
)

// rawRecorder is an endpoint that records every request as it came on the
// wire, parsed only as far as needed to find its end, and answers each 200
// "ok". A head it cannot make sense of is recorded and the connection
// closed.
type rawRecorder struct {
	addr string
	mu   sync.Mutex
	reqs []rawRequest
}

// rawRequest is one request the rawRecorder received: its target, normal,
// its normalised form (see diffForwarded), and whether it came whole (to
// the end of its framing).
type rawRequest struct {
	target, normal string
	complete       bool
}

func startRawRecorder(t *testing.T) *rawRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rawRecorder{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var conns sync.Map
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Go(func() {
				defer conns.Delete(c)
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(conformanceDeadline + 5*time.Second))
				r.serve(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	return r
}

func (r *rawRecorder) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		req, ok := readRawRequest(br)
		req.complete = ok
		if req.target != "" {
			r.mu.Lock()
			r.reqs = append(r.reqs, req)
			r.mu.Unlock()
		}
		if !ok {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

func (r *rawRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

func (r *rawRecorder) since(n int) []rawRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs[n:])
}

// readRawRequest reads one request from br: its head line by line, and its
// body by Content-Length or chunked (with its trailer section). ok is false
// when the request did not end as framed (what was read is returned).
func readRawRequest(br *bufio.Reader) (req rawRequest, ok bool) {
	var lines []string
	for range 1000 {
		line, err := br.ReadString('\n')
		if err != nil {
			return req, false
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			break
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return req, false
	}
	if f := strings.Fields(lines[0]); len(f) > 1 {
		req.target = f[1]
	}
	cl, chunked := 0, false
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch strings.ToLower(k) {
		case "content-length":
			cl, _ = strconv.Atoi(v)
		case "transfer-encoding":
			chunked = strings.EqualFold(v, "chunked")
		}
	}
	var body bytes.Buffer
	var trailers []string
	ok = true
	switch {
	case chunked:
		ok = false
		for range 1000 {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			size, _, _ := strings.Cut(strings.TrimSpace(line), ";")
			n, err := strconv.ParseInt(size, 16, 32)
			if err != nil {
				break
			}
			if n == 0 {
				for range 100 {
					line, err := br.ReadString('\n')
					line = strings.TrimRight(line, "\r\n")
					if err != nil || line == "" {
						ok = err == nil
						break
					}
					trailers = append(trailers, line)
				}
				break
			}
			if _, err := io.CopyN(&body, br, n); err != nil {
				break
			}
			if crlf, err := br.ReadString('\n'); err != nil || crlf != "\r\n" {
				break
			}
		}
	case cl > 0:
		_, err := io.CopyN(&body, br, int64(cl))
		ok = err == nil
	}
	req.normal = diffForwarded(lines, trailers, body.Bytes())
	return req, ok
}

// diffForwarded is the normal form of a request as an endpoint received
// it, which the fronts must agree on: the request line, the header fields
// (names lowercased, sorted) but for those the gateway writes itself
// (Host, the X-Forwarded-* and X-Dwara-* fields, X-Request-Id) or may frame
// otherwise (Content-Length, Transfer-Encoding, Trailer), the body
// unframed, and the trailer fields.
func diffForwarded(lines, trailers []string, body []byte) string {
	var fields []string
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ":")
		k = strings.ToLower(k)
		switch {
		case k == "host" || k == "x-request-id" || k == "content-length" || k == "transfer-encoding" || k == "trailer",
			strings.HasPrefix(k, "x-forwarded-"), strings.HasPrefix(k, "x-dwara-"):
			continue
		}
		fields = append(fields, k+":"+strings.TrimSpace(v))
	}
	slices.Sort(fields)
	var trailer []string
	for _, l := range trailers {
		k, v, _ := strings.Cut(l, ":")
		trailer = append(trailer, strings.ToLower(k)+":"+strings.TrimSpace(v))
	}
	slices.Sort(trailer)
	n := fmt.Sprintf("%s | %s | body %q | trailer %s", lines[0], strings.Join(fields, " "), body, strings.Join(trailer, " "))
	if len(n) > 300 {
		n = fmt.Sprintf("%s...(%d bytes, hash %x)", n[:200], len(n), split.Hash(n))
	}
	return n
}
