package main

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// tlsLoadTool is the name of bench/tlsload's binary, the load generator
// of the workload tlsresume: a new TLS connection per request, each
// resuming its client's session, which neither wrk nor h2load makes.
const tlsLoadTool = "bench-tlsload"

// minResumedPercent is the share of a tlsresume run's handshakes (those
// after each client's first) below which its row says that the contestant
// did not resume sessions: then the row measures full handshakes.
const minResumedPercent = 90

// tlsLoad is how bench-tlsload is run: as many clients as wrk has
// connections, on as many threads as wrk's, each connection verified
// against the run's certificate.
type tlsLoad struct {
	Bin     string
	Threads int
	Clients int
	CA      string
}

// resumeNote is the note of a tlsresume run of clients clients that made
// handshakes handshakes, resumed of them resuming a session, when too few
// of those that could (all but each client's first) did; else "".
func resumeNote(clients int, handshakes, resumed int64) string {
	could := handshakes - int64(clients)
	if could <= 0 {
		return fmt.Sprintf("%d handshakes by %d clients: none could resume a session", handshakes, clients)
	}
	pct := 100 * float64(min(resumed, could)) / float64(could)
	if pct >= minResumedPercent {
		return ""
	}
	return fmt.Sprintf("only %.0f%% of the handshakes that could resume a session did: this row measures full handshakes", pct)
}

// args is the command line of a run against url for d (whole seconds).
func (t tlsLoad) args(url string, d time.Duration) []string {
	return []string{t.Bin, "-url", url, "-c", strconv.Itoa(t.Clients), "-t", strconv.Itoa(t.Threads),
		"-d", strconv.Itoa(int(d/time.Second)) + "s", "-n", "1", "-ca", t.CA}
}

// run loads url (https on 127.0.0.1) with bench-tlsload for d and parses
// its WRKRESULT line. The run is bounded by d+wrkSlack and by ctx.
func (t tlsLoad) run(ctx context.Context, ps *procs, url string, d time.Duration) (wrkResult, error) {
	out, err := ps.run(ctx, d+wrkSlack, tlsLoadTool, nil, t.args(url, d)...)
	if err != nil {
		return wrkResult{}, fmt.Errorf("%w%s", err, lastLines(out, 5))
	}
	return parseTLSLoad(out, t.Clients)
}

// parseTLSLoad reads the WRKRESULT line of a bench-tlsload run of clients
// clients: wrk's fields, plus handshakes and resumed, which are required
// too and make the result's note (resumeNote).
func parseTLSLoad(out []byte, clients int) (wrkResult, error) {
	kv, err := wrkFields(out, "handshakes", "resumed")
	if err != nil {
		return wrkResult{}, err
	}
	r := kv.result()
	r.Note = resumeNote(clients, int64(kv["handshakes"]), int64(kv["resumed"]))
	return r, nil
}
