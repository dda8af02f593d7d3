package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
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
// reloader's certificate; nil (plain HTTP) for a nil reloader. The fronts
// set the protocols ALPN offers on copies of it.
func (r *certReloader) config() *tls.Config {
	if r == nil {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.getCertificate}
}

// start runs r under g, until ctx is done; a nil r runs nothing.
func (r *certReloader) start(ctx context.Context, g *errgroup.Group, reload <-chan struct{}) {
	if r != nil {
		g.Go(func() error { return r.run(ctx, reload) })
	}
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
