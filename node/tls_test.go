package node

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/proxy/httpfront"
	"github.com/dwara/dwara/internal/testcert"
)

// writeCert writes a fresh self-signed certificate for 127.0.0.1 named cn
// and its key to dir, and returns it.
func writeCert(t *testing.T, dir, cn string) *x509.Certificate {
	t.Helper()
	_, _, cert := testcert.Write(t, dir, cn)
	return cert
}

// tlsClient trusts certs and speaks HTTP/2 and HTTP/1.1; each call opens a
// new connection, so it sees the certificate being served now.
func tlsClient(certs ...*x509.Certificate) *http.Client {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr, Timeout: wait}
}

// TestGatewayServesTLS: on each front, with a certificate the proxy
// listener serves TLS, HTTP/2 by ALPN, the sticky cookie is Secure and the
// endpoint sees X-Forwarded-Proto https; a new certificate written over
// the files is served after a reload, and a broken one keeps the previous.
func TestGatewayServesTLS(t *testing.T) {
	t.Parallel()
	for _, front := range []string{FrontNetHTTP, FrontFastHTTP} {
		t.Run(strings.ReplaceAll(front, "/", ""), func(t *testing.T) {
			t.Parallel()
			testGatewayServesTLS(t, front)
		})
	}
}

func testGatewayServesTLS(t *testing.T, front string) {
	dir := t.TempDir()
	first := writeCert(t, dir, "first")
	a, b := pools(t)
	file := filepath.Join(dir, "dwara.yaml")
	spec := splitFile(a, b, 100, 0) + "    sticky: {cookie: sid}\n"
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	reload := make(chan struct{})
	c := GatewayConfig{ConfigFile: file, Front: front}
	c.TLS = &TLSFiles{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	c.TLSReload = reload
	gw := startGateway(t, c)
	gw.waitApplied(t, 1)

	url := "https://" + gw.Proxy + "/?echo=1"
	resp, err := tlsClient(first).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2", resp.Proto)
	}
	if sc := resp.Header.Get("Set-Cookie"); !strings.Contains(sc, "sid=") || !strings.Contains(sc, "; Secure") {
		t.Errorf("Set-Cookie %q, want a Secure sid cookie", sc)
	}
	if !strings.Contains(body, `"X-Forwarded-Proto":["https"]`) {
		t.Errorf("the endpoint saw %s, want X-Forwarded-Proto https", body)
	}

	// A new certificate, then a reload: new connections get it.
	second := writeCert(t, dir, "second")
	reload <- struct{}{}
	deadline := time.Now().Add(wait)
	for {
		resp, err := tlsClient(second).Get(url)
		if err == nil {
			readAll(t, resp)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate is not served after the reload: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded above
	}
	// A broken pair is refused; the second certificate stays.
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	reload <- struct{}{} // the first reload is done once the second is taken
	resp, err = tlsClient(second).Get(url)
	if err != nil {
		t.Fatalf("after a broken certificate: %v", err)
	}
	readAll(t, resp)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var sb strings.Builder
	if _, err := io.Copy(&sb, resp.Body); err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// startTLSGateway starts a gateway on front serving TLS with a fresh
// certificate named cn (returned), its one service split 100/0 over two
// pools, and waits for its first generation.
func startTLSGateway(t *testing.T, front, cn string) (*proc, *x509.Certificate) {
	t.Helper()
	dir := t.TempDir()
	cert := writeCert(t, dir, cn)
	a, b := pools(t)
	file := filepath.Join(dir, "dwara.yaml")
	if err := os.WriteFile(file, []byte(splitFile(a, b, 100, 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := GatewayConfig{ConfigFile: file, Front: front}
	c.TLS = &TLSFiles{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	gw := startGateway(t, c)
	gw.waitApplied(t, 1)
	return gw, cert
}

// TestHTTP2MaxFrameSize: on each front the proxy's HTTP/2 server announces
// SETTINGS_MAX_FRAME_SIZE httpfront.MaxReadFrameSize (16 KiB) in its first SETTINGS
// frame, not Go's 1 MiB, so a larger frame is a FRAME_SIZE_ERROR (h2spec
// 4.2 #3, which cmd/dwara's TestH2spec runs).
func TestHTTP2MaxFrameSize(t *testing.T) {
	t.Parallel()
	for _, front := range []string{FrontNetHTTP, FrontFastHTTP} {
		t.Run(strings.ReplaceAll(front, "/", ""), func(t *testing.T) {
			t.Parallel()
			gw, cert := startTLSGateway(t, front, "h2")
			const settingMaxFrameSize = 0x5
			if got, ok := serverSettings(t, gw.Proxy, cert)[settingMaxFrameSize]; !ok || got != httpfront.MaxReadFrameSize {
				t.Errorf("SETTINGS_MAX_FRAME_SIZE = %d (announced: %v), want %d", got, ok, httpfront.MaxReadFrameSize)
			}
		})
	}
}

// serverSettings opens an HTTP/2 connection to addr that trusts cert,
// sends the client preface and returns the settings of the server's first
// frame, which must be SETTINGS (RFC 9113, section 3.4).
func serverSettings(t *testing.T, addr string, cert *x509.Certificate) map[uint16]uint32 {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: wait}, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	if err := conn.SetDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	// The preface, then an empty SETTINGS frame: length 0, type 4, no
	// flags, stream 0.
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	var head [9]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		t.Fatalf("read the server's first frame: %v", err)
	}
	n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
	if head[3] != 0x4 || n%6 != 0 || n > 1<<14 {
		t.Fatalf("the server's first frame has type %d and length %d, want SETTINGS", head[3], n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(conn, payload); err != nil {
		t.Fatalf("read the server's SETTINGS: %v", err)
	}
	settings := make(map[uint16]uint32, n/6)
	for p := payload; len(p) >= 6; p = p[6:] {
		settings[binary.BigEndian.Uint16(p)] = binary.BigEndian.Uint32(p[2:6])
	}
	return settings
}

// TestServeFastFrontTLS: serve with Front fasthttp and a certificate
// serves its proxy over TLS on that front, HTTP/2 and HTTP/1.1, and its
// admin listener over TLS.
func TestServeFastFrontTLS(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	a, b := pools(t)
	dir := t.TempDir()
	cert := writeCert(t, dir, "serve")
	c := ServeConfig{DatabaseURL: url, Front: FrontFastHTTP}
	c.TLS = &TLSFiles{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	srv := startServe(t, c)

	body, err := json.Marshal(map[string]any{"message": "test", "spec": specJSON(a, b, 100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tlsClient(cert).Post("https://"+srv.Admin+"/api/v1/generations", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("publish over TLS: %v", err)
	}
	if answer := readAll(t, resp); resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish over TLS: %d %s", resp.StatusCode, answer)
	}
	srv.waitApplied(t, 1)

	resp, err = tlsClient(cert).Get("https://" + srv.Proxy + "/?echo=1")
	if err != nil {
		t.Fatal(err)
	}
	answer := readAll(t, resp)
	if resp.ProtoMajor != 2 || resp.Header.Get("X-Pool") != "pool-a" || !strings.Contains(answer, `"X-Forwarded-Proto":["https"]`) {
		t.Errorf("HTTP/2: %s from %q: %s; want HTTP/2 from pool-a with X-Forwarded-Proto https", resp.Proto, resp.Header.Get("X-Pool"), answer)
	}
	// A client that offers only http/1.1 by ALPN.
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}, DisableKeepAlives: true}
	resp, err = (&http.Client{Transport: h1, Timeout: wait}).Get("https://" + srv.Proxy + "/?echo=1")
	if err != nil {
		t.Fatal(err)
	}
	answer = readAll(t, resp)
	if proto := resp.TLS.NegotiatedProtocol; proto != "http/1.1" || resp.ProtoMajor != 1 || resp.Header.Get("X-Pool") != "pool-a" || !strings.Contains(answer, `"X-Forwarded-Proto":["https"]`) {
		t.Errorf("HTTP/1.1: %s (%q) from %q: %s; want http/1.1 from pool-a with X-Forwarded-Proto https", resp.Proto, proto, resp.Header.Get("X-Pool"), answer)
	}
}

// TestGatewayResumesTLSSessions: on each front, over HTTP/1.1 and HTTP/2,
// a client's next connection resumes its TLS session (a session ticket
// from the connection before), as the benchmark's tlsresume row assumes.
func TestGatewayResumesTLSSessions(t *testing.T) {
	t.Parallel()
	for _, front := range []string{FrontNetHTTP, FrontFastHTTP} {
		t.Run(strings.ReplaceAll(front, "/", ""), func(t *testing.T) {
			t.Parallel()
			gw, cert := startTLSGateway(t, front, "resume")
			pool := x509.NewCertPool()
			pool.AddCert(cert)
			for _, proto := range []string{"http/1.1", "h2"} {
				sessions := tls.NewLRUClientSessionCache(1)
				var resumed []bool
				for range 3 {
					// A transport of its own per request: a new connection
					// each time, the session cache shared.
					tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ClientSessionCache: sessions,
						NextProtos: []string{proto}}, ForceAttemptHTTP2: proto == "h2"}
					resp, err := (&http.Client{Transport: tr, Timeout: wait}).Get("https://" + gw.Proxy + "/")
					if err != nil {
						t.Fatal(err)
					}
					readAll(t, resp)
					tr.CloseIdleConnections()
					if got := resp.TLS.NegotiatedProtocol; got != proto {
						t.Fatalf("negotiated %q, want %q", got, proto)
					}
					resumed = append(resumed, resp.TLS.DidResume)
				}
				if resumed[0] || !resumed[1] || !resumed[2] {
					t.Errorf("%s: resumed %v over three connections; want the second and third to resume", proto, resumed)
				}
			}
		})
	}
}
