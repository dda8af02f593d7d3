package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// workload is what the load generator sends, to every contestant alike.
type workload struct {
	name string
	desc string
	// path is the request path.
	path string
	// postBytes, when positive, makes every request a POST with a body of
	// that many bytes (the upstream reads and discards it).
	postBytes int
	// connClose sends `Connection: close`: one TCP connection per request.
	connClose bool
	// tls serves the contestant over TLS (HTTP/1.1 for wrk; h2 by ALPN).
	tls bool
	// h2 loads it with h2load over TLS, ALPN h2, instead of wrk.
	h2 bool
	// resume loads it with bench-tlsload over TLS instead of wrk: a new
	// connection per request, each resuming the client's session.
	resume bool
	// bigAnswers: answers larger than nginx's stock proxy buffers.
	bigAnswers bool
	// bigBuffers: payloads over HAProxy's stock 16 KiB buffer.
	bigBuffers bool
	// noCeiling, when not empty, says why direct is no ceiling for w.
	noCeiling string
	// cacheURLs, when positive, makes w the cacheable GET: wrk cycles
	// through that many URLs, path?k=1..cacheURLs, which the upstream
	// answers with Cache-Control: public, max-age=3600, and every proxy
	// gets a cache (see the templates).
	cacheURLs int
}

// workloads lists every workload, in the order of the table.
var workloads = []workload{
	{name: "get", desc: "GET /, a ~40-byte answer, keep-alive", path: "/"},
	{name: "get16k", desc: "GET /bytes/16384 (16 KiB answer), keep-alive", path: "/bytes/16384", bigAnswers: true, bigBuffers: true},
	{name: "get256k", desc: "GET /bytes/262144 (256 KiB answer), keep-alive", path: "/bytes/262144", bigAnswers: true, bigBuffers: true},
	{name: "post4k", desc: "POST / with a 4 KiB body (read and discarded upstream), keep-alive", path: "/", postBytes: 4 << 10},
	{name: "post1m", desc: "POST / with a 1 MiB body (read and discarded upstream), keep-alive", path: "/", postBytes: 1 << 20, bigBuffers: true},
	{name: "newconn", desc: "GET / with Connection: close, a new TCP connection per request", path: "/", connClose: true,
		noCeiling: "the upstream (Go's net/http) accepts and closes every connection itself; a proxy does that in its own front and reuses pooled upstream connections"},
	{name: "tls", desc: "GET / over TLS 1.3, HTTP/1.1 keep-alive, self-signed ECDSA P-256 certificate", path: "/", tls: true},
	{name: "tlsresume", desc: "GET / over TLS 1.3, HTTP/1.1, a new connection per request, each resuming its client's session (PSK from a session ticket), self-signed ECDSA P-256 certificate",
		path: "/", tls: true, resume: true,
		noCeiling: "the upstream (Go's net/http) makes every handshake and connection itself; a proxy does that in its own front and reuses pooled upstream connections"},
	{name: "h2", desc: "GET / over TLS 1.3, HTTP/2 (ALPN h2), self-signed ECDSA P-256 certificate", path: "/", tls: true, h2: true,
		noCeiling: "the upstream serves HTTP/2 itself (Go's net/http); a proxy does that in its own front and speaks HTTP/1.1 upstream"},
	{name: "cache", desc: "GET /cache/1024?k=1..100 (1 KiB answer, Cache-Control: public, max-age=3600), 100 URLs in turn, keep-alive; every proxy caches",
		path: "/cache/1024", cacheURLs: 100,
		noCeiling: "the upstream (Go's net/http) makes every answer itself, while a proxy answers from its cache (filled during the warm-up) without an upstream exchange"},
}

// scheme is the URL scheme the contestant is loaded over.
func (w workload) scheme() string {
	if w.tls {
		return "https"
	}
	return "http"
}

// loadGen names the load generator of w.
func (w workload) loadGen() string {
	if w.h2 {
		return "h2load"
	}
	if w.resume {
		return tlsLoadTool
	}
	return "wrk"
}

// workloadNamed returns the workload called name, if there is one.
func workloadNamed(name string) (workload, bool) {
	i := slices.IndexFunc(workloads, func(w workload) bool { return w.name == name })
	if i < 0 {
		return workload{}, false
	}
	return workloads[i], true
}

// workloadNames returns the names of every workload, in order.
func workloadNames() []string {
	var names []string
	for _, w := range workloads {
		names = append(names, w.name)
	}
	return names
}

// errStickyWorkload explains why sticky is not a workload.
var errStickyWorkload = errors.New(`WORKLOADS: "sticky" is not a workload: new sticky sessions are the contestants ` +
	`dwara-sticky and haproxy-sticky, which run in every workload (name them in CONTESTANTS)`)

// parseWorkloads splits a comma- or space-separated list, checks every
// name and returns the workloads in table order, without duplicates.
func parseWorkloads(s string) ([]workload, error) {
	want := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	if len(want) == 0 {
		return nil, errors.New("WORKLOADS is empty")
	}
	for _, w := range want {
		if w == "sticky" {
			return nil, errStickyWorkload
		}
		if !slices.Contains(workloadNames(), w) {
			return nil, fmt.Errorf("WORKLOADS: unknown workload %q; known: %s", w, strings.Join(workloadNames(), " "))
		}
	}
	return slices.DeleteFunc(slices.Clone(workloads), func(w workload) bool { return !slices.Contains(want, w.name) }), nil
}

// cached reports whether w is the cacheable GET, whose proxies cache.
func (w workload) cached() bool { return w.cacheURLs > 0 }

// target is the request target of w, as the header of the table shows it.
func (w workload) target() string {
	if w.cached() {
		return fmt.Sprintf("%s?k=1..%d", w.path, w.cacheURLs)
	}
	return w.path
}

// wrkScript returns the Lua script wrk runs for w: for a POST workload, or
// the cacheable GET, the request setup, then the done() hook printing the
// WRKRESULT line.
func (w workload) wrkScript() string {
	if w.cached() {
		return fmt.Sprintf(`-- Written by bench/compare for workload %[1]s: GET %[2]s?k=1..%[3]d, each thread
-- taking the %[3]d URLs in turn; the requests are built once per thread, in init
-- (after wrk has set the Host field).
local reqs = {}
local n = 0
init = function(args)
  for i = 1, %[3]d do
    reqs[i] = wrk.format("GET", "%[2]s?k=" .. i)
  end
end
request = function()
  n = n %% %[3]d + 1
  return reqs[n]
end
`, w.name, w.path, w.cacheURLs) + wrkReport
	}
	if w.postBytes <= 0 {
		return wrkReport
	}
	return fmt.Sprintf(`-- Written by bench/compare for workload %s: every request is a POST with a
-- %d-byte body (wrk adds Content-Length; the request is built once per thread).
wrk.method = "POST"
wrk.body = string.rep("x", %d)
wrk.headers["Content-Type"] = "application/octet-stream"
`, w.name, w.postBytes, w.postBytes) + wrkReport
}

// wrkArgs returns the extra wrk arguments of w.
func (w workload) wrkArgs() []string {
	if w.connClose {
		return []string{"-H", "Connection: close"}
	}
	return nil
}
