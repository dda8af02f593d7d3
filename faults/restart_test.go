package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/node"
)

// buildDwara builds the dwara binary into a temporary directory.
func buildDwara(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "dwara")
	gocmd := os.Getenv("GO")
	if gocmd == "" {
		gocmd = "go"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gocmd, "build", "-o", bin, "./cmd/dwara")
	cmd.Dir = ".." // the module's root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/dwara: %v\n%s", err, out)
	}
	return bin
}

// child is a dwara process started from the binary.
type child struct {
	cmd  *exec.Cmd
	logs *testlog.Buffer
	done chan struct{} // closed once it exited
	err  error         // its exit, once done
}

// startChild starts bin with args; it is killed when the test ends if it
// still runs, and its output is logged when the test failed.
func startChild(t *testing.T, name, bin string, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(bin, args...), logs: &testlog.Buffer{}, done: make(chan struct{})}
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	c.cmd.Env = append(os.Environ(), "DWARA_LOG_LEVEL=info")
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("%s (pid %d) output (last 6 KiB):\n%s", name, c.cmd.Process.Pid, tail([]byte(c.logs.String()), 6<<10))
		}
	})
	return c
}

// kill sends SIGKILL and waits until the process is gone.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// waitStatus waits until GET url answers want, failing the test when the
// process exits or it does not within wait.
func (c *child) waitStatus(t *testing.T, url string, want int) time.Duration {
	t.Helper()
	took, err := c.await(wait, func() bool {
		a := callAPI(http.MethodGet, url, nil)
		return a.err == nil && a.status == want
	})
	if err != nil {
		t.Fatalf("GET %s did not answer %d: %v", url, want, err)
	}
	return took
}

// await calls cond every 20 ms until it holds, and returns how long that
// took; an error when the process exited first or within passed.
func (c *child) await(within time.Duration, cond func() bool) (time.Duration, error) {
	exited := false
	took, ok := until(within, 20*time.Millisecond, func() bool {
		select {
		case <-c.done:
			exited = true
			return true
		default:
		}
		return cond()
	})
	switch {
	case exited:
		return took, fmt.Errorf("the process exited (%v) after %v", c.err, took.Round(time.Millisecond))
	case !ok:
		return took, fmt.Errorf("not within %v", within)
	}
	return took, nil
}

// TestAcknowledgedPublishSurvivesKill runs `dwara serve` from the binary,
// publishes a generation and SIGKILLs the process as soon as the 201's
// header arrives, three times over; each time the process started again
// has the acknowledged generation in the API and serves it from its proxy
// (the generation the echo upstream sees in X-Dwara-Generation), and the
// audit log has the accepted call.
func TestAcknowledgedPublishSurvivesKill(t *testing.T) {
	need(t)
	t.Parallel()
	bin := buildDwara(t)
	url := dbtest.New(t)
	a, b := pools(t)
	listen, admin := testnet.FreeAddr(t), testnet.FreeAddr(t)
	args := []string{"serve", "--listen", listen, "--admin-listen", admin, "--database-url", url}

	type acked struct {
		id      int64
		message string
		pool    string // "" when either pool may answer
	}
	var last *acked
	rounds := []struct {
		wa, wb int
		pool   string
	}{{100, 0, "pool-a"}, {0, 100, "pool-b"}, {50, 50, ""}}
	for round := 0; round <= len(rounds); round++ {
		c := startChild(t, fmt.Sprintf("dwara serve (start %d)", round+1), bin, args...)
		up := c.waitStatus(t, "http://"+admin+"/healthz", http.StatusOK)
		if last != nil {
			ready := c.waitStatus(t, "http://"+admin+"/readyz", http.StatusOK)
			checkDurable(t, admin, listen, last.id, last.message, last.pool)
			t.Logf("start %d: the API answered %v after the start, ready %v after that, with generation %d", round+1,
				up.Round(time.Millisecond), ready.Round(time.Millisecond), last.id)
		}
		if round == len(rounds) {
			c.kill()
			break
		}
		r := rounds[round]
		msg := fmt.Sprintf("faults: acknowledged then killed, round %d", round+1)
		body, _ := json.Marshal(map[string]any{"message": msg, "spec": specJSON(a, b, r.wa, r.wb)})
		req, _ := http.NewRequest(http.MethodPost, "http://"+admin+"/api/v1/generations", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := apiClient.Do(req)
		if err != nil {
			t.Fatalf("round %d: publish: %v", round+1, err)
		}
		// SIGKILL as soon as the 201's header is here: whatever the process
		// had not made durable by then is lost.
		c.kill()
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("round %d: publish answered %d, want 201", round+1, resp.StatusCode)
		}
		id, err := strconv.ParseInt(strings.TrimPrefix(resp.Header.Get("Location"), "/api/v1/generations/"), 10, 64)
		if err != nil {
			t.Fatalf("round %d: Location %q: %v", round+1, resp.Header.Get("Location"), err)
		}
		last = &acked{id: id, message: msg, pool: r.pool}
		t.Logf("round %d: generation %d acknowledged (201), then the process was killed (%v)", round+1, id, c.err)
	}
}

// checkDurable checks that generation id (with message) is the current
// one in the API at admin, that the proxy at listen serves it (from pool
// when not ""), and that the audit log has its accepted publish.
func checkDurable(t *testing.T, admin, listen string, id int64, message, pool string) {
	t.Helper()
	var cur apiv1.Generation
	getJSON(t, "http://"+admin+"/api/v1/generations/current", &cur)
	if cur.ID != id || cur.Message != message {
		t.Errorf("after the restart the current generation is %d %q, want the acknowledged %d %q", cur.ID, cur.Message, id, message)
	}
	for i := range 10 {
		s, err := getVia(listen)
		if err != nil || s.generation != id || (pool != "" && s.pool != pool) {
			t.Errorf("request %d through the restarted proxy: %+v, %v; want generation %d from %q", i, s, err, id, pool)
			break
		}
	}
	var audit apiv1.AuditList
	getJSON(t, "http://"+admin+"/api/v1/audit?limit=50", &audit)
	for _, e := range audit.Items {
		if e.GenerationID != nil && *e.GenerationID == id && e.Outcome == apiv1.OutcomeAccepted {
			return
		}
	}
	t.Errorf("no accepted audit entry for generation %d", id)
}

// TestRollingRestartUnderLoad runs two replicas behind a client-side
// round-robin while 8 clients send GETs to an upstream that takes 20 ms per
// request (so requests are in flight at every moment), and restarts one
// replica, then the other: each is stopped gracefully (its context
// cancelled: it stops accepting and drains what it accepted), a client
// refused by the stopped one goes to the other, as a load balancer does,
// and the restarted one is put back in rotation once it applied the
// generation (its readiness). No request a proxy accepted may fail.
func TestRollingRestartUnderLoad(t *testing.T) {
	need(t)
	t.Parallel()
	store, url := dbtest.NewStore(t)
	up := startUpstream(t, "slow", 2, 20*time.Millisecond)
	g, err := store.Publish(context.Background(), db.PublishParams{
		Spec:   spectest.New().Upstream("slow", up.addrs...).Route("web", "/", "slow").JSON(),
		Action: apiv1.ActionCreate, Author: "faults",
	})
	if err != nil {
		t.Fatal(err)
	}
	addrs := [2]string{testnet.FreeAddr(t), testnet.FreeAddr(t)}
	startReplica := func(i int, name string) *proc {
		p := startGateway(t, name, node.GatewayConfig{DatabaseURL: url, Process: node.Process{Listen: addrs[i]}})
		p.waitApplied(t, g.ID, wait)
		return p
	}
	replicas := [2]*proc{startReplica(0, "replica 0"), startReplica(1, "replica 1")}

	var (
		next       atomic.Uint64
		inRotation [2]atomic.Bool
		inFlight   [2]atomic.Int64
		refused    [2]atomic.Int64
	)
	inRotation[0].Store(true)
	inRotation[1].Store(true)
	traffic := startLoad(t, 8, 3*time.Minute, func(_, _ int) (string, error) {
		first := int(next.Add(1) % 2)
		for _, k := range []int{first, 1 - first} {
			if !inRotation[k].Load() {
				continue
			}
			inFlight[k].Add(1)
			_, err := getVia(addrs[k])
			inFlight[k].Add(-1)
			switch {
			case err == nil:
				return fmt.Sprintf("replica %d", k), nil
			case isRefused(err):
				// Nothing was sent: the load balancer tries the other one.
				refused[k].Add(1)
				continue
			default:
				return "", fmt.Errorf("via replica %d: %w", k, err)
			}
		}
		return "", errors.New("no replica in rotation took the request")
	})
	traffic.waitMore(t, 300)
	for k := range 2 {
		flying := inFlight[k].Load()
		t0 := time.Now()
		replicas[k].stop() // graceful: returns once drained
		drained := time.Since(t0)
		refusedBefore := refused[k].Load()
		traffic.waitMore(t, 300) // still in rotation: refused, served by the other
		t.Logf("replica %d: %d requests in flight when it was stopped, drained in %v; %d requests refused by it while it was down",
			k, flying, drained.Round(time.Millisecond), refused[k].Load()-refusedBefore)
		if refused[k].Load() == refusedBefore {
			t.Errorf("replica %d: no client was refused while it was down", k)
		}
		inRotation[k].Store(false) // the load balancer's health check notices
		replicas[k] = startReplica(k, fmt.Sprintf("replica %d restarted", k))
		inRotation[k].Store(true) // ready: back in rotation
		traffic.waitMore(t, 300)
	}
	traffic.report(t, "GETs through two replicas restarted in turn")
	t.Logf("refused and sent to the other replica: %d by replica 0, %d by replica 1", refused[0].Load(), refused[1].Load())
}
