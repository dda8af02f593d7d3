package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/client"
	"github.com/dwara/dwara/gateway/config"
)

// clientConfig is the client verbs' configuration file (like kubectl's
// kubeconfig): named contexts, each an API with its credentials, and the
// one in use.
//
//	current-context: prod
//	contexts:
//	  prod:
//	    api: https://dwara.example.com:9090
//	    token-file: prod.token          # relative to the file's directory
//	    certificate-authority: prod-ca.pem
//	  local:
//	    api: http://127.0.0.1:9090
type clientConfig struct {
	CurrentContext string                   `json:"current-context,omitempty"`
	Contexts       map[string]clientContext `json:"contexts,omitempty"`
}

// clientContext is one API and how to reach it.
type clientContext struct {
	API                   string `json:"api,omitempty"`
	TokenFile             string `json:"token-file,omitempty"`
	CertificateAuthority  string `json:"certificate-authority,omitempty"`
	InsecureSkipTLSVerify bool   `json:"insecure-skip-tls-verify,omitempty"`
	Actor                 string `json:"actor,omitempty"`
}

// configPath is the configuration file's path: --config-file, else
// $DWARA_CONFIG, else dwara/config.yaml under $XDG_CONFIG_HOME (else
// ~/.config).
func configPath(flagValue string, getenv func(string) string) string {
	if flagValue != "" {
		return flagValue
	}
	if p := getenv("DWARA_CONFIG"); p != "" {
		return p
	}
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "dwara", "config.yaml")
}

// loadConfig reads the configuration file at path; a file that does not
// exist is an empty configuration.
func loadConfig(path string) (*clientConfig, error) {
	c := &clientConfig{}
	if path == "" {
		return c, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("configuration file: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, fmt.Errorf("configuration file %s: %w (fields of a context: api, token-file, certificate-authority, insecure-skip-tls-verify, actor)", path, err)
	}
	for name := range c.Contexts {
		if name == "" {
			return nil, fmt.Errorf("configuration file %s: a context has an empty name", path)
		}
	}
	return c, nil
}

// save writes c to path atomically (a temporary file renamed over it),
// readable by its owner only: it names token files.
func (c *clientConfig) save(path string) error {
	if path == "" {
		return errors.New("no configuration file: set $HOME, $DWARA_CONFIG or --config-file")
	}
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("configuration file: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("configuration file: %w", err)
	}
	defer os.Remove(f.Name()) // after the rename, nothing is there
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("configuration file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("configuration file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("configuration file: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("configuration file: %w", err)
	}
	return nil
}

// names returns the contexts' names, sorted.
func (c *clientConfig) names() []string {
	names := make([]string, 0, len(c.Contexts))
	for n := range c.Contexts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// context returns the context called name ("" the current one; none when
// there is no current one either). An unknown name is a usage error
// naming the contexts there are.
func (c *clientConfig) context(name, path string) (clientContext, error) {
	if name == "" {
		name = c.CurrentContext
		if name == "" {
			return clientContext{}, nil
		}
	}
	ctx, ok := c.Contexts[name]
	if !ok {
		return clientContext{}, usagef("%s", c.unknownContext(name, path))
	}
	return ctx, nil
}

// unknownContext says that the configuration has no context name.
func (c *clientConfig) unknownContext(name, path string) string {
	msg := fmt.Sprintf("no context %q in %s", name, path)
	if len(c.Contexts) == 0 {
		return msg + ": it has none; add one with \"dwara config set-context NAME --api URL\""
	}
	msg += "; its contexts: " + strings.Join(c.names(), ", ")
	if near := config.Nearest(name, c.names()); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return msg
}

// resolve makes path, from a context of the configuration file at
// configFile, absolute: relative to the file's directory, "~/" the home
// directory.
func resolve(path, configFile string, getenv func(string) string) string {
	switch {
	case path == "" || filepath.IsAbs(path):
		return path
	case strings.HasPrefix(path, "~/"):
		return filepath.Join(getenv("HOME"), path[2:])
	}
	return filepath.Join(filepath.Dir(configFile), path)
}

// connection is how one verb run reaches the API, from the flags, the
// environment and the context, in that order of precedence.
type connection struct {
	url, token, actor string
	transport         http.RoundTripper // nil: the default
}

// connect works out the connection of g (the global flags) with the
// environment of s.
func (g *globals) connect(s IO, mutating bool) (connection, error) {
	path := configPath(g.configFile, s.Getenv)
	cfg, err := loadConfig(path)
	if err != nil {
		return connection{}, err
	}
	ctx, err := cfg.context(g.context, path)
	if err != nil {
		return connection{}, err
	}
	c := connection{url: first(g.api, s.Getenv("DWARA_API_URL"), ctx.API, client.DefaultURL)}
	switch contextToken := resolve(ctx.TokenFile, path, s.Getenv); {
	case g.tokenFile != "":
		if c.token, err = readToken(g.tokenFile, "--token-file"); err != nil {
			return connection{}, err
		}
	case s.Getenv("DWARA_ADMIN_TOKEN") != "":
		c.token = s.Getenv("DWARA_ADMIN_TOKEN")
	case contextToken != "":
		if c.token, err = readToken(contextToken, "the context's token-file"); err != nil {
			return connection{}, err
		}
	}
	if mutating {
		c.actor = first(g.actor, ctx.Actor, s.Getenv("USER"), s.Getenv("LOGNAME"))
	}
	ca := first(g.cacert, resolve(ctx.CertificateAuthority, path, s.Getenv))
	insecure := g.insecure || (!g.insecureSet && ctx.InsecureSkipTLSVerify)
	if ca != "" || insecure {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // asked for by --insecure-skip-tls-verify
		if ca != "" && !insecure {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return connection{}, fmt.Errorf("certificate authority: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return connection{}, fmt.Errorf("certificate authority %s: no PEM certificate in it", ca)
			}
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		c.transport = tr
	}
	if mutating && c.actor == "" {
		// Refused at the first change the verb sends, so its own usage
		// mistakes (arguments, files) are reported first.
		c.transport = noActor{next: c.transport}
	}
	return c, nil
}

// errNoActor refuses a change with no author: the audit trail records who
// made every change, and "anonymous" is nobody.
var errNoActor = usagef("who makes the change? give --actor NAME (or set $USER, or an actor in the context): every change is recorded with its author")

// noActor is the transport of a mutating verb that has no actor: it sends
// reads (GET, HEAD) and refuses anything else with errNoActor.
type noActor struct{ next http.RoundTripper }

func (n noActor) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, errNoActor
	}
	next := n.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// readToken reads a bearer token from the file at path (what names it, for
// the error): its content without surrounding white space, not empty.
func readToken(path, what string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("%s %s is empty", what, path)
	}
	return tok, nil
}

// first returns the first non-empty string of vs, or "".
func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
