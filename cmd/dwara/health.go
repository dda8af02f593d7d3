package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// defaultHealthURL is serve's /healthz on its default admin listener.
const defaultHealthURL = "http://127.0.0.1:9090/healthz"

// setupHealth is `dwara health`: a GET of a /healthz that prints the answer
// and exits 0 on a 200, and otherwise says why on stderr and exits 1. The distroless image has no
// shell and no curl, so its HEALTHCHECK runs this.
func setupHealth(fs *flag.FlagSet) func(context.Context, []string) error {
	raw := fs.String("url", defaultHealthURL, "the health `URL`; one without a path gets /healthz (a gateway's is on its --metrics-listen)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if *timeout <= 0 {
			return usagef("--timeout must be positive")
		}
		u, err := healthURL(*raw)
		if err != nil {
			return usagef("--url %q: %v", *raw, err)
		}
		body, err := checkHealth(ctx, u, *timeout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dwara health: %s: %v\n", u, err)
			return exitError(1)
		}
		fmt.Println(body)
		return nil
	}
}

// healthURL parses a --url: http or https, with a host; an empty path (or
// "/") means /healthz.
func healthURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("want http(s)://HOST:PORT[/PATH]")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/healthz"
	}
	return u.String(), nil
}

// checkHealth GETs u within timeout and returns the start of its body when
// it answers 200, else why not.
func checkHealth(ctx context.Context, u string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("User-Agent", "dwara-health")
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return strings.TrimSpace(string(body)), nil
}
