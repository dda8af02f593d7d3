package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// TLSFiles are the PEM files of the certificate (with its chain) and key a
// process serves its listeners with.
type TLSFiles struct {
	Cert, Key string
}

// certPollInterval is how often a certReloader looks for changed files.
const certPollInterval = 10 * time.Second

// certReloader holds the certificate of TLSFiles and loads it again when
// told to (SIGHUP) or when either file changes; a pair that fails to load
// is logged and the previous one kept. Safe for concurrent use.
type certReloader struct {
	files TLSFiles
	log   *slog.Logger
	cert  atomic.Pointer[tls.Certificate]
	// stamp is the files' modification times and sizes at the last load.
	stamp atomic.Value // string
}

// newCertReloader loads the pair once; an error there stops the process
// from starting.
func newCertReloader(files TLSFiles, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{files: files, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) load() error {
	stamp := r.fileStamp()
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return fmt.Errorf("tls: load %s and %s: %w", r.files.Cert, r.files.Key, err)
	}
	r.cert.Store(&cert)
	r.stamp.Store(stamp)
	return nil
}

// fileStamp identifies the files' current contents by modification time
// and size.
func (r *certReloader) fileStamp() string {
	s := ""
	for _, f := range []string{r.files.Cert, r.files.Key} {
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return s
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// config is the TLS configuration of a listener: TLS 1.2 and newer, the
// reloader's certificate.
func (r *certReloader) config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.getCertificate}
}

// run reloads on every receive from reload and whenever the files change,
// until ctx is done.
func (r *certReloader) run(ctx context.Context, reload <-chan struct{}) error {
	tick := time.NewTicker(certPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reload:
		case <-tick.C:
			if old, _ := r.stamp.Load().(string); old == r.fileStamp() {
				continue
			}
		}
		if err := r.load(); err != nil {
			r.log.Error("certificate not reloaded; serving the previous one", "err", err)
			continue
		}
		r.log.Info("certificate reloaded", "cert", r.files.Cert)
	}
}

// useTLS makes s serve TLS with r's certificate, HTTP/2 and HTTP/1.1
// negotiated by ALPN: a net/http server itself, the fasthttp front through
// a tlsFront, which does the handshakes (each within the read-header
// timeout) and hands the connections that negotiate HTTP/2 to s.h2.
func (s *server) useTLS(r *certReloader) {
	if s.fast != nil {
		c := r.config()
		c.NextProtos = []string{"h2", "http/1.1"}
		s.front = newTLSFront(s.ln, c, s.h2.ReadHeaderTimeout, r.log.With("listener", s.name), s.fast, s.h2)
		return
	}
	s.srv.TLSConfig = r.config()
	s.srv.Protocols = http1And2()
	s.srv.HTTP2 = http2Config()
	s.tls = true
}

// maxReadFrameSize is the largest HTTP/2 frame the servers read: the
// protocol's initial SETTINGS_MAX_FRAME_SIZE (RFC 9113, section 6.5.2),
// which every peer must be able to send within, instead of Go's 1 MiB.
// Go's framer keeps a read buffer per connection as large as the largest
// frame it has read, so this bounds it at 16 KiB rather than letting each
// client grow it to 1 MiB; and a header block over it gets the
// FRAME_SIZE_ERROR h2spec expects (its case 4.2 #3 sends a 20 KB HEADERS
// frame, taking 16 KiB for the limit whatever the server announced).
const maxReadFrameSize = 16 << 10

// http2Config is the HTTP/2 configuration of every server that serves it:
// Go's defaults but for maxReadFrameSize.
func http2Config() *http.HTTP2Config {
	return &http.HTTP2Config{MaxReadFrameSize: maxReadFrameSize}
}

// http1And2 is the protocol set of a net/http server that serves TLS:
// HTTP/1.1 and HTTP/2, chosen by ALPN.
func http1And2() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	return p
}
