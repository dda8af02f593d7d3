// Command tlsload is the load generator of bench/compare's workload
// tlsresume: TLS handshakes that resume a session, which neither wrk nor
// h2load makes (each of their connections starts a session of its own).
//
// Each of -c clients, in a loop for -d (or for -conns connections),
// opens a TLS connection to -url
// that resumes the client's last session (in TLS 1.3 a PSK from the
// session ticket the server sent on the connection before; each client
// keeps its own, as a browser does for a site), sends -n GET requests on it
// over HTTP/1.1, the last one with `Connection: close`, reads each answer
// to its end, and closes it. The clients run on -t threads (GOMAXPROCS),
// as wrk's -t. It prints one line, the one bench/compare's wrk script
// prints, with the handshakes and how many of them resumed:
//
//	WRKRESULT requests=N duration_us=D rps=R p50_us=P p99_us=Q max_us=M errors=E err_status=S handshakes=H resumed=K
//
// A request's latency runs from the dial, for the first request of a
// connection (so that the handshake is in it), or from the write of the
// request for the others, to the end of its answer. Errors are failed
// dials, handshakes, writes and reads and answers that are not 2xx or 3xx
// (err_status counts those). The key exchange is X25519, as the OpenSSL
// of wrk and h2load makes it. It refuses any address that is not
// a loopback one.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
)

func main() {
	target := flag.String("url", "", "https URL on a loopback address to load, e.g. https://127.0.0.1:18100/ (required)")
	clients := flag.Int("c", 64, "clients, each with one connection at a time")
	threads := flag.Int("t", 2, "threads the clients run on (GOMAXPROCS)")
	dur := flag.Duration("d", 10*time.Second, "how long clients start new connections")
	perConn := flag.Int("n", 1, "requests on each connection")
	caFile := flag.String("ca", "", "PEM certificate(s) to verify the server's certificate with (required)")
	timeout := flag.Duration("timeout", 10*time.Second, "bound of each connection's handshake and of each request")
	conns := flag.Int("conns", 0, "connections each client makes at most, before -d is over (0: no bound)")
	flag.Parse()
	cfg, err := parseConfig(*target, *caFile, *clients, *threads, *perConn, *dur, *timeout)
	if err != nil {
		log.Fatalf("tlsload: %v", err)
	}
	if *conns < 0 {
		log.Fatalf("tlsload: -conns must not be negative (got %d)", *conns)
	}
	cfg.conns = *conns
	runtime.GOMAXPROCS(cfg.threads)
	res := run(context.Background(), cfg)
	fmt.Println(res.line())
	if res.firstErr != nil {
		fmt.Fprintf(os.Stderr, "tlsload: %d errors; the first: %v\n", res.errors, res.firstErr)
	}
}

// config is one run's settings, checked.
type config struct {
	addr, host, path string
	roots            *x509.CertPool
	clients, threads int
	perConn          int
	dur, timeout     time.Duration
	// conns bounds each client's connections; 0: none but dur.
	conns int
}

// parseConfig checks the flags.
func parseConfig(target, caFile string, clients, threads, perConn int, dur, timeout time.Duration) (config, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return config{}, fmt.Errorf("-url %q: want an https URL such as https://127.0.0.1:18100/", target)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || port == "" {
		return config{}, fmt.Errorf("-url %q: want host:port", target)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return config{}, fmt.Errorf("-url %q: %s is not a loopback address; tlsload loads 127.0.0.1 or ::1 only", target, host)
	}
	if clients < 1 || threads < 1 || perConn < 1 {
		return config{}, fmt.Errorf("-c, -t and -n must be at least 1 (got %d, %d, %d)", clients, threads, perConn)
	}
	if dur <= 0 || timeout <= 0 {
		return config{}, fmt.Errorf("-d and -timeout must be positive (got %v, %v)", dur, timeout)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return config{}, fmt.Errorf("-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return config{}, fmt.Errorf("-ca %s: no PEM certificate in it", caFile)
	}
	path := u.RequestURI()
	return config{addr: u.Host, host: host, path: path, roots: roots, clients: clients, threads: threads,
		perConn: perConn, dur: dur, timeout: timeout}, nil
}

// result is what a run measured.
type result struct {
	requests, errors, errStatus int64
	handshakes, resumed         int64
	elapsed                     time.Duration
	latencies                   []time.Duration // sorted
	firstErr                    error           // of the first client that had one
}

// fail counts err.
func (r *result) fail(err error) {
	r.errors++
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// line is the WRKRESULT line of r.
func (r result) line() string {
	q := func(p float64) int64 {
		if len(r.latencies) == 0 {
			return 0
		}
		i := int(float64(len(r.latencies))*p+0.999999) - 1
		return r.latencies[min(max(i, 0), len(r.latencies)-1)].Microseconds()
	}
	rps := 0.0
	if r.elapsed > 0 {
		rps = float64(r.requests) / r.elapsed.Seconds()
	}
	return fmt.Sprintf("WRKRESULT requests=%d duration_us=%d rps=%.1f p50_us=%d p99_us=%d max_us=%d errors=%d err_status=%d handshakes=%d resumed=%d",
		r.requests, r.elapsed.Microseconds(), rps, q(0.50), q(0.99), q(1), r.errors, r.errStatus, r.handshakes, r.resumed)
}

// run loads cfg's address with cfg.clients clients until cfg.dur has
// passed (or ctx ends), each then finishing the connection it is on.
func run(ctx context.Context, cfg config) result {
	start := time.Now()
	end := start.Add(cfg.dur)
	parts := make([]result, cfg.clients)
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() { parts[i] = client(ctx, cfg, end) })
	}
	wg.Wait()
	total := result{elapsed: time.Since(start)}
	for _, p := range parts {
		total.requests += p.requests
		total.errors += p.errors
		total.errStatus += p.errStatus
		total.handshakes += p.handshakes
		total.resumed += p.resumed
		total.latencies = append(total.latencies, p.latencies...)
		if total.firstErr == nil {
			total.firstErr = p.firstErr
		}
	}
	slices.Sort(total.latencies)
	return total
}

// client is one client's loop: a connection at a time, each resuming the
// session of the one before.
func client(ctx context.Context, cfg config, end time.Time) result {
	tc := &tls.Config{
		RootCAs:            cfg.roots,
		ServerName:         cfg.host,
		NextProtos:         []string{"http/1.1"},
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: tls.NewLRUClientSessionCache(1),
		// X25519 first, the key exchange wrk's and h2load's OpenSSL makes
		// with every contestant here: Go's default would also offer the
		// post-quantum hybrid, which a Go server (dwara, direct) takes and
		// pays for while nginx's and HAProxy's OpenSSL 3.0 cannot. P-256
		// is listed too: an ECDSA certificate's curve must be (TLS 1.2).
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256},
	}
	var r result
	var br *bufio.Reader
	d := net.Dialer{Timeout: cfg.timeout}
	last := fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: tlsload\r\nConnection: close\r\n\r\n", cfg.path, cfg.addr)
	keep := fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: tlsload\r\n\r\n", cfg.path, cfg.addr)
	for ctx.Err() == nil && time.Now().Before(end) && (cfg.conns == 0 || r.handshakes < int64(cfg.conns)) {
		t0 := time.Now()
		nc, err := d.DialContext(ctx, "tcp", cfg.addr)
		if err != nil {
			r.fail(fmt.Errorf("dial: %w", err))
			continue
		}
		conn := tls.Client(nc, tc)
		_ = conn.SetDeadline(t0.Add(cfg.timeout))
		r.handshakes++
		if err := conn.HandshakeContext(ctx); err != nil {
			r.fail(fmt.Errorf("handshake: %w", err))
			nc.Close()
			continue
		}
		if conn.ConnectionState().DidResume {
			r.resumed++
		}
		if br == nil {
			br = bufio.NewReaderSize(conn, 16<<10)
		} else {
			br.Reset(conn)
		}
		for i := range cfg.perConn {
			req := keep
			if i == cfg.perConn-1 {
				req = last
			}
			if i > 0 {
				t0 = time.Now()
				_ = conn.SetDeadline(t0.Add(cfg.timeout))
			}
			status, err := exchange(conn, br, req)
			if err != nil {
				r.fail(fmt.Errorf("request %d of the connection: %w", i+1, err))
				break
			}
			r.requests++
			r.latencies = append(r.latencies, time.Since(t0))
			if status < 200 || status > 399 {
				r.fail(fmt.Errorf("answered %d", status))
				r.errStatus++
			}
		}
		conn.Close()
	}
	return r
}

// exchange writes req on conn and reads its answer, through br, to its
// end; it returns the answer's status.
func exchange(conn net.Conn, br *bufio.Reader, req []byte) (int, error) {
	if _, err := conn.Write(req); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	return resp.StatusCode, nil
}
