package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// tls13Suites is the TLS 1.3 cipher suite preference given to nginx and
// HAProxy: TLS_AES_128_GCM_SHA256 first, the suite Go's crypto/tls (dwara,
// the direct upstream) picks on AES-NI hardware, so that no contestant pays
// for AES-256 while another gets AES-128.
const tls13Suites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

// certFiles are the PEM files of the run's self-signed certificate.
type certFiles struct {
	Cert, Key string
	// Combined holds the certificate and then the key, as HAProxy's `crt`
	// wants them.
	Combined string
	// pool trusts the certificate, for the benchmark's own requests.
	pool *x509.CertPool
}

// makeCert makes a self-signed ECDSA P-256 certificate for 127.0.0.1 (CN
// and SAN), valid for two days, and writes it under dir.
func makeCert(dir string, now time.Time) (certFiles, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certFiles{}, fmt.Errorf("certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return certFiles{}, fmt.Errorf("certificate: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: loopback, Organization: []string{"dwara bench-compare"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP(loopback)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return certFiles{}, fmt.Errorf("certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return certFiles{}, fmt.Errorf("certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return certFiles{}, fmt.Errorf("certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return certFiles{}, fmt.Errorf("certificate: %w", err)
	}
	f := certFiles{
		Cert:     filepath.Join(dir, "cert.pem"),
		Key:      filepath.Join(dir, "key.pem"),
		Combined: filepath.Join(dir, "cert-and-key.pem"),
		pool:     x509.NewCertPool(),
	}
	f.pool.AddCert(cert)
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{f.Cert, certPEM, 0o644},
		{f.Key, keyPEM, 0o600},
		{f.Combined, append(append([]byte{}, certPEM...), keyPEM...), 0o600},
	} {
		if err := os.WriteFile(w.path, w.data, w.mode); err != nil {
			return certFiles{}, fmt.Errorf("certificate: %w", err)
		}
	}
	return f, nil
}

// tlsClient is like client but speaks HTTPS to 127.0.0.1, trusting only
// the run's certificate, and TLS 1.3 only: the TLS workloads are TLS 1.3,
// so a contestant that does not offer it (Debian 12's nginx 1.22 leaves it
// out of its default ssl_protocols) fails its readiness check rather than
// being measured on TLS 1.2.
func tlsClient(pool *x509.CertPool) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     5 * time.Second,
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13},
		},
		Timeout: 2 * time.Second,
	}
}
