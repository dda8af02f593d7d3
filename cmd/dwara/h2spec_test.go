package main

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testcert"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testdocs"
)

// h2specCases is the number of cases h2spec 2.2.1 runs (all of them but
// the strict ones, which -S would add).
const h2specCases = 145

// h2specExplained are the h2spec cases a dwara process fails when Go's
// HTTP/2 server serves its HTTP/2 (--front net/http, or --http2
// net/http), each with why: all of them are decisions of Go's server that
// cannot be changed from outside it (docs/operating.md, "Limits, TLS and
// logs", says the same). Dwara's own HTTP/2 server, the default, fails
// none. A case is keyed by its package and its number in h2spec's
// listing (`h2spec --dryrun`) and carries its description, so that a
// renumbered suite is noticed. Any other failure fails TestH2spec, and so
// does a case of this list that passes.
var h2specExplained = []struct {
	id, desc, why string
}{
	{
		id:   "http2/6.5.3/1",
		desc: "Sends multiple values of SETTINGS_INITIAL_WINDOW_SIZE",
		why: "Go's server refuses a SETTINGS frame that repeats an identifier (or has more than 100 settings) " +
			"with GOAWAY PROTOCOL_ERROR, a hardening of its own (serverConn.processSettings); RFC 9113 only asks " +
			"that the values be processed in order",
	},
	{
		id:   "http2/8.1.2.2/1",
		desc: "Sends a HEADERS frame that contains the connection-specific header field",
		why: "Go's server answers a request with Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding or " +
			"Upgrade with its own 400 and ends the stream instead of RST_STREAM PROTOCOL_ERROR " +
			"(checkValidHTTP2RequestHeaders, called before the server's handler); the request never reaches the proxy",
	},
	{
		id:   "http2/8.1.2.2/2",
		desc: `Sends a HEADERS frame that contains the TE header field with any value other than "trailers"`,
		why:  `the same check as 8.1.2.2/1, for TE other than "trailers": a 400 from Go's server, not forwarded`,
	},
}

// TestH2specREADME: the documentation (docs/reliability.md) gives h2spec's result as TestH2spec
// expects it, and names each explained failure (as "6.5.3 #1").
func TestH2specREADME(t *testing.T) {
	t.Parallel()
	text := strings.Join(strings.Fields(testdocs.Text(t, "../..")), " ") // lines wrap anywhere
	for _, want := range []string{
		fmt.Sprintf("all %d of its cases", h2specCases),
		fmt.Sprintf("%d of its %d cases", h2specCases-len(h2specExplained), h2specCases),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the documentation does not say h2spec passes %q", want)
		}
	}
	for _, e := range h2specExplained {
		i := strings.LastIndexByte(e.id, '/')
		if name := strings.TrimPrefix(e.id[:i], "http2/") + " #" + e.id[i+1:]; !strings.Contains(text, name) {
			t.Errorf("the documentation does not explain h2spec's %s (%s)", name, e.id)
		}
	}
}

// h2specReport is the part of h2spec's JUnit report read here.
type h2specReport struct {
	Suites []struct {
		Package string `xml:"package,attr"`
		Cases   []struct {
			Desc    string    `xml:"classname,attr"`
			Error   *h2specAt `xml:"error"`
			Failure *h2specAt `xml:"failure"`
			Skipped *h2specAt `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

type h2specAt struct {
	Text string `xml:",chardata"`
}

// h2specBinary returns the h2spec to run: $DWARA_H2SPEC when it is set
// (CI sets it: the test then fails when the file is missing instead of
// skipping), else bin/h2spec of the repository (make h2spec builds it),
// else an h2spec on PATH; "" when there is none.
func h2specBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DWARA_H2SPEC"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("DWARA_H2SPEC=%s: %v (make h2spec builds it)", p, err)
		}
		return p
	}
	if p, err := filepath.Abs("../../bin/h2spec"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("h2spec"); err == nil {
		return p
	}
	return ""
}

// TestH2spec runs h2spec, the HTTP/2 conformance suite, against a dwara
// gateway process serving TLS: on the default front (fasthttp, which
// hands the connections that negotiate h2 to dwara's own HTTP/2 server),
// where every case must pass; and with Go's HTTP/2 server (--http2
// net/http, and --front net/http), where every case must pass but those
// of h2specExplained, which must fail.
func TestH2spec(t *testing.T) {
	t.Parallel()
	bin := h2specBinary(t)
	if bin == "" {
		t.Skip("h2spec not found: make h2spec builds bin/h2spec from the module proxy and runs this test")
	}
	for _, tt := range []struct {
		name string
		args []string
		goH2 bool // Go's HTTP/2 server: h2specExplained fail
	}{
		{name: "default front", args: nil},
		{name: "fasthttp front with Go's HTTP2", args: []string{"--http2", "net/http"}, goH2: true},
		{name: "net/http front", args: []string{"--front", "net/http"}, goH2: true},
	} {
		t.Run(strings.ReplaceAll(tt.name, "/", ""), func(t *testing.T) {
			t.Parallel()
			testH2spec(t, bin, tt.args, tt.goH2)
		})
	}
}

func testH2spec(t *testing.T, bin string, extra []string, goH2 bool) {
	pool, err := demo.StartPool("h2", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	other, err := demo.StartPool("other", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	dir := t.TempDir()
	cert, key := writeTLSPair(t, dir)
	file := filepath.Join(dir, "dwara.yaml")
	if err := os.WriteFile(file, []byte(spectest.SplitOver([]*demo.Pool{pool, other}, 100, 0).YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"gateway", "--config", file, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key}
	args = append(args, extra...)
	p := startProc(t, args...)
	_, m := p.log.waitFor(t, 0, listeningRe)
	p.log.waitFor(t, 0, appliedRe)
	_, port, err := net.SplitHostPort(m[1])
	if err != nil {
		t.Fatal(err)
	}

	// Each case waits 3 s at most for the frame it expects (-o; h2spec's
	// default is 2 s, which a loaded CI machine might miss). The run takes
	// about 11 s: h2spec waits 1 s in four cases, and the two 8.1.2.2
	// failures wait the whole -o for the RST_STREAM that never comes.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	junit := filepath.Join(dir, "h2spec.xml")
	cmd := exec.CommandContext(ctx, bin, "-t", "-k", "-h", "127.0.0.1", "-p", port, "-o", "3", "-j", junit)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("h2spec did not finish within its bound: %v\n%s", ctx.Err(), out)
	}
	if ee, ok := errors.AsType[*exec.ExitError](err); err != nil && !ok {
		t.Fatalf("run %s: %v", bin, err) // exit status 1 only says that some case failed
	} else if ok && ee.ExitCode() != 1 {
		t.Fatalf("h2spec exited %d:\n%s", ee.ExitCode(), out)
	}
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatalf("h2spec wrote no report: %v\n%s", err, out)
	}
	var report h2specReport
	if err := xml.Unmarshal(data, &report); err != nil {
		t.Fatalf("h2spec's report: %v", err)
	}

	explained := make(map[string]string, len(h2specExplained))
	for _, e := range h2specExplained {
		if goH2 {
			explained[e.id] = e.desc
		}
	}
	total, passed := 0, 0
	for _, s := range report.Suites {
		for i, c := range s.Cases {
			total++
			id := fmt.Sprintf("%s/%d", s.Package, i+1)
			desc, known := explained[id]
			if known && desc != c.Desc {
				t.Errorf("%s is %q in this h2spec, the explained failure is %q: renumber h2specExplained and the README", id, c.Desc, desc)
			}
			delete(explained, id)
			switch failed := c.Error != nil || c.Failure != nil; {
			case c.Skipped != nil:
				t.Errorf("%s (%s) skipped: %s", id, c.Desc, c.Skipped.Text)
			case failed && !known:
				want, got := failureText(c.Error, c.Failure)
				t.Errorf("%s (%s) fails: want %s; got %s", id, c.Desc, want, got)
			case !failed && known:
				t.Errorf("%s (%s) passes now: take it out of h2specExplained and the README", id, c.Desc)
				passed++
			case !failed:
				passed++
			}
		}
	}
	for id := range explained {
		t.Errorf("explained case %s is not in h2spec's report", id)
	}
	if total != h2specCases {
		t.Errorf("h2spec ran %d cases, want %d", total, h2specCases)
	}
	t.Logf("h2spec: %d of %d cases pass (%q)", passed, total, extra)
	if t.Failed() {
		if _, failures, ok := strings.Cut(string(out), "\nFailures:"); ok {
			out = []byte(failures)
		}
		t.Logf("h2spec's failures:%s", out)
		t.Logf("dwara stderr:\n%s", p.log)
	}
}

// failureText splits what h2spec reports of a failed case into what it
// expected (one of the lines but the last) and what came (the last).
func failureText(e, f *h2specAt) (want, got string) {
	at := e
	if at == nil {
		at = f
	}
	lines := strings.Split(strings.TrimSpace(at.Text), "\n")
	return strings.Join(lines[:len(lines)-1], " or "), lines[len(lines)-1]
}

// writeTLSPair writes a fresh self-signed certificate for 127.0.0.1 and
// its key to dir, and returns their paths.
func writeTLSPair(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile, _ = testcert.Write(t, dir, "h2spec")
	return certFile, keyFile
}
