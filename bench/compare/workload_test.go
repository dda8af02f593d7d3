package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseWorkloads(t *testing.T) {
	t.Parallel()
	got, err := parseWorkloads("h2, get post4k,get")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range got {
		names = append(names, w.name)
	}
	if !slices.Equal(names, []string{"get", "post4k", "h2"}) {
		t.Errorf("parseWorkloads = %v, want table order without duplicates", names)
	}
	all, err := parseWorkloads(strings.Join(workloadNames(), ","))
	if err != nil || len(all) != 10 {
		t.Errorf("all workloads: %d, %v", len(all), err)
	}
	for in, want := range map[string]string{
		"":          "WORKLOADS is empty",
		" , ":       "WORKLOADS is empty",
		"get,put1g": `unknown workload "put1g"`,
	} {
		if _, err := parseWorkloads(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseWorkloads(%q) = %v, want an error containing %q", in, err, want)
		}
	}
	if _, err := parseWorkloads("get,sticky"); !errors.Is(err, errStickyWorkload) {
		t.Errorf("parseWorkloads(sticky) = %v, want the explanation that sticky is contestants", err)
	}
}

// TestWorkloadRequests pins what each workload sends.
func TestWorkloadRequests(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, scheme, path, gen string
		post                    int
		args                    []string
	}{
		{"get", "http", "/", "wrk", 0, nil},
		{"get16k", "http", "/bytes/16384", "wrk", 0, nil},
		{"get256k", "http", "/bytes/262144", "wrk", 0, nil},
		{"post4k", "http", "/", "wrk", 4096, nil},
		{"post1m", "http", "/", "wrk", 1 << 20, nil},
		{"newconn", "http", "/", "wrk", 0, []string{"-H", "Connection: close"}},
		{"tls", "https", "/", "wrk", 0, nil},
		{"tlsresume", "https", "/", tlsLoadTool, 0, nil},
		{"h2", "https", "/", "h2load", 0, nil},
		{"cache", "http", "/cache/1024", "wrk", 0, nil},
	} {
		w := mustWorkload(tt.name)
		if w.scheme() != tt.scheme || w.path != tt.path || w.loadGen() != tt.gen || w.postBytes != tt.post || !slices.Equal(w.wrkArgs(), tt.args) {
			t.Errorf("%s: %s %s via %s, post %d, args %q; want %s %s via %s, post %d, args %q", tt.name,
				w.scheme(), w.path, w.loadGen(), w.postBytes, w.wrkArgs(), tt.scheme, tt.path, tt.gen, tt.post, tt.args)
		}
		script := w.wrkScript()
		if !strings.HasSuffix(script, wrkReport) {
			t.Errorf("%s: the wrk script does not end with the report hook", tt.name)
		}
		if isPost := strings.Contains(script, `wrk.method = "POST"`); isPost != (tt.post > 0) {
			t.Errorf("%s: POST in the script = %v", tt.name, isPost)
		}
		if tt.post > 0 && !strings.Contains(script, fmt.Sprintf(`wrk.body = string.rep("x", %d)`, tt.post)) {
			t.Errorf("%s: script does not send a %d-byte body:\n%s", tt.name, tt.post, script)
		}
		if cycles := strings.Contains(script, "request = function()"); cycles != (tt.name == "cache") {
			t.Errorf("%s: the script builds its own requests = %v", tt.name, cycles)
		}
	}
	w := mustWorkload("cache")
	if !w.cached() || w.cacheURLs != 100 || w.target() != "/cache/1024?k=1..100" || w.noCeiling == "" {
		t.Errorf("cache: cached %v, %d URLs, target %q, noCeiling %q", w.cached(), w.cacheURLs, w.target(), w.noCeiling)
	}
	for _, w := range workloads {
		if w.name != "cache" && (w.cached() || w.target() != w.path) {
			t.Errorf("%s: cached %v, target %q", w.name, w.cached(), w.target())
		}
	}
}

// TestWrkCacheScript runs wrk with the cache workload's script against a
// server that records the request targets: every thread takes the 100
// URLs in turn, each of them is asked for, nothing else is. Skipped
// without wrk.
func TestWrkCacheScript(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("wrk is not installed")
	}
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method+" "+r.URL.RequestURI()]++
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	w := mustWorkload("cache")
	script := filepath.Join(t.TempDir(), "cache.lua")
	if err := os.WriteFile(script, []byte(w.wrkScript()), 0o644); err != nil {
		t.Fatal(err)
	}
	ps := &procs{}
	defer ps.stopAll()
	res, err := wrkLoad{Bin: bin, Threads: 2, Connections: 4}.run(t.Context(), ps, srv.URL+w.path, script, w.wrkArgs(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if res.Requests < 200 {
		t.Fatalf("wrk made %d requests in 1 s, too few to have cycled twice", res.Requests)
	}
	for i := 1; i <= w.cacheURLs; i++ {
		target := fmt.Sprintf("GET %s?k=%d", w.path, i)
		if seen[target] == 0 {
			t.Errorf("%s was never asked for", target)
		}
		delete(seen, target)
	}
	if len(seen) > 0 {
		t.Errorf("requests for other targets: %v", seen)
	}
}

func TestParseHAProxyCaps(t *testing.T) {
	t.Parallel()
	full := `HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/
  OPTIONS = USE_PCRE2=1 USE_OPENSSL=1 USE_LUA=1
Built with OpenSSL version : OpenSSL 3.0.22 25 Aug 2026
Available multiplexer protocols :
         h2 : mode=HTTP  side=FE|BE  mux=H2    flags=HTX|HOL_RISK|NO_UPG
       fcgi : mode=HTTP  side=BE     mux=FCGI  flags=HTX|HOL_RISK|NO_UPG
`
	if got := parseHAProxyCaps([]byte(full)); got != (haproxyCaps{TLS: true, H2: true}) {
		t.Errorf("full build: %+v", got)
	}
	beOnly := strings.Replace(full, "side=FE|BE", "side=BE", 1)
	if got := parseHAProxyCaps([]byte(beOnly)); got != (haproxyCaps{TLS: true}) {
		t.Errorf("h2 on the back end only: %+v", got)
	}
	noSSL := "HAProxy version 2.6\n  OPTIONS = USE_PCRE2=1\n         h2 : mode=HTTP  side=FE|BE  mux=H2\n"
	if got := parseHAProxyCaps([]byte(noSSL)); got != (haproxyCaps{}) {
		t.Errorf("without OpenSSL: %+v", got)
	}
	b := &bench{haproxy: haproxyCaps{TLS: true}}
	if why := b.skipReason(lookup("haproxy"), mustWorkload("h2")); why == "" {
		t.Error("haproxy without h2 is not skipped for h2")
	}
	if why := b.skipReason(lookup("haproxy-sticky"), mustWorkload("tls")); why != "" {
		t.Errorf("haproxy with TLS skipped for tls: %s", why)
	}
	if why := (&bench{}).skipReason(lookup("dwara"), mustWorkload("h2")); why != "" {
		t.Errorf("dwara skipped for h2: %s", why)
	}
	for name, skip := range map[string]bool{"haproxy-sticky": true, "haproxy": false, "dwara-sticky": false, "nginx": false} {
		if why := (&bench{}).skipReason(lookup(name), mustWorkload("cache")); (why != "") != skip {
			t.Errorf("%s skipped for cache: %q, want skipped %v", name, why, skip)
		}
	}
}

func TestDebianPackage(t *testing.T) {
	t.Parallel()
	for tool, pkg := range map[string]string{"h2load": "nghttp2-client", "wrk": "wrk", "nginx": "nginx", "haproxy": "haproxy"} {
		if got := debianPackage(tool); got != pkg {
			t.Errorf("debianPackage(%s) = %s, want %s", tool, got, pkg)
		}
	}
}

// TestMakeCert: an ECDSA P-256 certificate for 127.0.0.1 that a server
// can load and tlsClient trusts.
func TestMakeCert(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := makeCert(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.PublicKeyAlgorithm != x509.ECDSA || cert.Subject.CommonName != loopback || len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal([]byte{127, 0, 0, 1}) {
		t.Errorf("certificate: %v, CN %q, IPs %v", cert.PublicKeyAlgorithm, cert.Subject.CommonName, cert.IPAddresses)
	}
	if fi, err := os.Stat(f.Key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", fi.Mode(), err)
	}
	combined, err := os.ReadFile(f.Combined)
	if err != nil || !strings.Contains(string(combined), "BEGIN CERTIFICATE") || !strings.Contains(string(combined), "BEGIN PRIVATE KEY") {
		t.Errorf("combined file: %v", err)
	}

	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()
	status, _, body, err := get(t.Context(), tlsClient(f.pool), srv.URL+"/", "")
	if err != nil || status != 200 || string(body) != "ok" {
		t.Errorf("GET over TLS with the run's certificate: %d %q %v", status, body, err)
	}
	// A server without TLS 1.3 is refused (nginx 1.22's default protocols).
	old := httptest.NewUnstartedServer(srv.Config.Handler)
	old.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MaxVersion: tls.VersionTLS12}
	old.StartTLS()
	defer old.Close()
	if _, _, _, err := get(t.Context(), tlsClient(f.pool), old.URL+"/", ""); err == nil {
		t.Error("GET over TLS 1.2 succeeded; the run's client must insist on TLS 1.3")
	}
}
