package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The differential test: one corpus of odd requests
// (testdata/differential.txt) goes through every front, each with its own
// gateway and a raw recording endpoint behind it, in one go test run. For
// each case the fronts must agree, and meet the case's expectation, on the
// status class of each answer, on whether the client connection was kept,
// and on what the endpoint received (nothing, or the same requests).

// diffCase is one case of the corpus.
type diffCase struct {
	name string
	in   []byte
	want diffOutcome
}

// diffOutcome is what one front did with a case's input: the status class
// ("2xx") of each answer before the probe's, whether the probe was
// answered on the same connection (kept), and the requests the endpoint
// received, each as diffForwarded normalises it.
type diffOutcome struct {
	classes   []string
	kept      bool
	forwarded []string
}

func (o diffOutcome) String() string {
	classes := "-"
	if len(o.classes) > 0 {
		classes = strings.Join(o.classes, ",")
	}
	keep := "close"
	if o.kept {
		keep = "keep"
	}
	return fmt.Sprintf("%s %s %d %q", classes, keep, len(o.forwarded), o.forwarded)
}

// loadDiffCorpus reads the corpus (its format is described at its top).
func loadDiffCorpus(t *testing.T) []diffCase {
	t.Helper()
	b, err := os.ReadFile("testdata/differential.txt")
	if err != nil {
		t.Fatal(err)
	}
	var cases []diffCase
	for i, line := range strings.Split(string(b), "\n") {
		fail := func(format string, args ...any) {
			t.Fatalf("testdata/differential.txt:%d: %s", i+1, fmt.Sprintf(format, args...))
		}
		if line == "" || line[0] == '#' {
			continue
		}
		key, val, ok := strings.Cut(line, ": ")
		if !ok {
			fail("want key: value")
		}
		if key == "case" {
			cases = append(cases, diffCase{name: val})
			continue
		}
		if len(cases) == 0 {
			fail("%s before the first case", key)
		}
		c := &cases[len(cases)-1]
		switch {
		case key == "want":
			f := strings.Fields(val)
			n, err := strconv.Atoi(f[len(f)-1])
			if len(f) != 3 || err != nil || f[1] != "keep" && f[1] != "close" {
				fail("want: classes keep|close count")
			}
			if f[0] != "-" {
				c.want.classes = strings.Split(f[0], ",")
			}
			c.want.kept = f[1] == "keep"
			c.want.forwarded = make([]string, n)
		case key == "in" || strings.HasPrefix(key, "in*"):
			n := 1
			if key != "in" {
				if n, err = strconv.Atoi(key[3:]); err != nil {
					fail("in*N: N is a count")
				}
			}
			s, err := strconv.Unquote(val)
			if err != nil {
				fail("in: %v", err)
			}
			c.in = append(c.in, strings.Repeat(s, n)...)
		default:
			fail("unknown key %q", key)
		}
	}
	return cases
}

// diffHeadTimeout is the fronts' request-head timeout in the differential
// test: a case that takes this long shows a front waiting for more of a
// head, which no case should make it do; it is long enough that no head of
// the corpus is cut on a busy machine.
const diffHeadTimeout = 5 * time.Second

// diffProbe is the request sent after each case's input on the same
// connection: an answer carrying its request id shows the connection was
// kept (and that the answers before it belong to the input).
const diffProbe = "GET /probe HTTP/1.1\r\nHost: a.example\r\nX-Request-Id: differential-probe\r\n\r\n"

// run sends in and the probe on a new connection to f, and returns what
// came of it. It runs on a goroutine of its own: it reports with t.Error.
func (f sideFront) run(t *testing.T, in []byte) diffOutcome {
	t.Helper()
	before := f.up.count()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Error(err)
		return diffOutcome{}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(conformanceDeadline))
	var o diffOutcome
	// The writes may fail once the front refused the input and closed.
	if _, err := c.Write(in); err == nil {
		_, _ = io.WriteString(c, diffProbe)
	}
	br := bufio.NewReader(c)
	for range 8 { // more answers than any case can have
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if isTimeout(err) {
				t.Errorf("%s: no answer and no close within %v", f.name, conformanceDeadline)
			}
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("X-Request-Id") == "differential-probe" {
			o.kept = true
			break
		}
		o.classes = append(o.classes, fmt.Sprintf("%dxx", resp.StatusCode/100))
		if resp.Close {
			break
		}
	}
	// Every request the front forwarded was answered before the answers
	// read above (the probe's came after them), so the endpoint holds
	// them all by now. A request cut before its end (a body that turned
	// out bad after its head went out: every front streams bodies) is no
	// request the endpoint can act on, and is not counted.
	for _, r := range f.up.since(before) {
		if r.target != "/probe" && r.complete {
			o.forwarded = append(o.forwarded, r.normal)
		}
	}
	return o
}

// TestDifferentialFronts sends the corpus through every front and checks
// that each front does what the case wants, and that the fronts forward the
// same bytes (as diffForwarded normalises them).
func TestDifferentialFronts(t *testing.T) {
	t.Parallel()
	fronts := serveEveryFront(t, diffHeadTimeout)
	for _, tc := range loadDiffCorpus(t) {
		t.Run(tc.name, func(t *testing.T) {
			outcomes := make([]diffOutcome, len(fronts))
			var wg sync.WaitGroup
			took := make([]time.Duration, len(fronts))
			for i, f := range fronts {
				wg.Go(func() {
					start := time.Now()
					outcomes[i] = f.run(t, tc.in)
					took[i] = time.Since(start)
				})
			}
			wg.Wait()
			for i, f := range fronts {
				o := outcomes[i]
				if !slices.Equal(o.classes, tc.want.classes) || o.kept != tc.want.kept || len(o.forwarded) != len(tc.want.forwarded) {
					t.Errorf("%s: %v; want %v", f.name, o, tc.want)
				}
				if took[i] >= diffHeadTimeout {
					t.Errorf("%s took %v: it waited for the head timeout (%v)", f.name, took[i].Round(time.Millisecond), diffHeadTimeout)
				}
				if i > 0 && !slices.Equal(o.forwarded, outcomes[0].forwarded) {
					t.Errorf("%s forwarded %q; %s forwarded %q", f.name, o.forwarded, fronts[0].name, outcomes[0].forwarded)
				}
			}
		})
	}
}
