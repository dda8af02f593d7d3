package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/dwara/dwara/api/apiv1"
)

// fakeClock is a settable clock for the flood controls.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// withClock gives e's server a fake clock and a refusal limiter of limit
// and burst.
func (e *env) withClock(limit rate.Limit, burst int) *fakeClock {
	c := &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	e.srv.now = c.Now
	e.srv.refusals = newLimiterSet(limit, burst, maxLimiters)
	return c
}

// Refused calls from one address are limited: past the burst they are
// answered 429 with Retry-After and not written, but counted, and the next
// entry of that address says how many were dropped. Accepted calls are
// never limited.
func TestRefusalsAreRateLimited(t *testing.T) {
	t.Parallel()
	const token = "s3cret"
	e := newEnv(t, Options{Token: token})
	clock := e.withClock(1, 3) // 1 refusal a second, bursts of 3
	bearer := map[string]string{"Authorization": "Bearer " + token}
	e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(90, 10)}, header: bearer}).
		want(t, http.StatusCreated)

	var statuses []int
	for i := range 10 {
		r := e.do(call{method: "POST", path: "/api/v1/services/api/flip", header: map[string]string{"X-Request-Id": fmt.Sprint("flood-", i)}})
		statuses = append(statuses, r.status)
		if r.status == http.StatusTooManyRequests {
			p := r.problem(t)
			if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 || p.Status != 429 ||
				r.header.Get("WWW-Authenticate") != "" {
				t.Errorf("429: Retry-After %q, WWW-Authenticate %q, problem %+v", r.header.Get("Retry-After"), r.header.Get("WWW-Authenticate"), p)
			}
		}
	}
	want := []int{401, 401, 401, 429, 429, 429, 429, 429, 429, 429}
	if fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", statuses, want)
	}
	if n := e.srv.RefusalsDropped(); n != 7 {
		t.Errorf("RefusalsDropped = %d, want 7", n)
	}
	// An accepted call is never limited.
	e.do(call{method: "POST", path: "/api/v1/services/api/flip", header: bearer}).want(t, http.StatusCreated)

	// The three admitted refusals are one entry (identical), counted 3.
	entries := e.auditWith(bearer)
	if len(entries) != 3 {
		t.Fatalf("audit = %+v, want create, the refusals and the flip", entries)
	}
	if r := entries[1]; r.Status != 401 || r.Count != 3 || r.Actor != actorUnauthenticated {
		t.Errorf("refusal entry = %+v, want one 401 entry counted 3", r)
	}

	// A second later the address may be refused once more: a new entry
	// (a different refusal) that says how many were dropped before it.
	clock.Advance(time.Second)
	e.do(call{method: "POST", path: "/api/v1/services/api/kill"}).want(t, http.StatusUnauthorized)
	a := e.auditWith(bearer)[0]
	var detail struct {
		Dropped int `json:"dropped"`
	}
	if err := json.Unmarshal(a.Detail, &detail); err != nil || a.Action != apiv1.ActionKill || detail.Dropped != 7 {
		t.Errorf("entry after the drops = %+v (dropped %d), want the kill saying 7 were dropped", a, detail.Dropped)
	}
}

// Identical refusals within the window are one entry with a count; after
// it, a new entry. A different refusal is an entry of its own.
func TestIdenticalRefusalsCollapse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{Token: "s3cret"})
	clock := e.withClock(rate.Inf, 1)
	bearer := map[string]string{"Authorization": "Bearer s3cret"}
	flip := call{method: "POST", path: "/api/v1/services/api/flip"}
	for range 25 {
		e.do(flip).want(t, http.StatusUnauthorized)
	}
	e.do(call{method: "POST", path: "/api/v1/services/api/kill"}).want(t, http.StatusUnauthorized)
	clock.Advance(burstWindow - time.Millisecond)
	e.do(flip).want(t, http.StatusUnauthorized) // still in the first burst
	clock.Advance(time.Millisecond)
	e.do(flip).want(t, http.StatusUnauthorized) // a new burst
	e.do(flip).want(t, http.StatusUnauthorized)

	entries := e.auditWith(bearer)
	var got []string
	for _, a := range entries {
		got = append(got, fmt.Sprintf("%s×%d", a.Action, a.Count))
	}
	if want := "[flip×2 kill×1 flip×26]"; fmt.Sprint(got) != want {
		t.Errorf("audit = %v, want %s", got, want)
	}
}

// Concurrent identical refusals are counted exactly once each.
func TestConcurrentIdenticalRefusalsCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{Token: "s3cret"})
	e.withClock(rate.Inf, 1)
	const n = 40
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			e.do(call{method: "POST", path: "/api/v1/services/api/flip"})
		})
	}
	wg.Wait()
	entries := e.auditWith(map[string]string{"Authorization": "Bearer s3cret"})
	if len(entries) != 1 || entries[0].Count != n {
		t.Errorf("audit = %+v, want one entry counted %d", entries, n)
	}
}

// The limiters and bursts tracked are bounded, whatever the number of
// addresses; idle ones are forgotten.
func TestFloodStateIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLimiterSet(1, 1, 3)
	for i := range 100 {
		addr := fmt.Sprintf("192.0.2.%d", i)
		l.allow(addr, now)
	}
	if len(l.m) != 3 {
		t.Errorf("%d limiters, want at most 3", len(l.m))
	}
	// Past max, new addresses share the overflow limiter: all but the
	// first of them are refused.
	if ok, _, _ := l.allow("198.51.100.1", now); ok {
		t.Error("a new address past max was not limited by the overflow limiter")
	}
	// Once the tracked ones are idle (full again), they are forgotten.
	now = now.Add(time.Minute)
	if ok, _, _ := l.allow("198.51.100.2", now); !ok || len(l.m) != 1 {
		t.Errorf("after the idle ones were swept: ok %t, %d limiters; want a fresh limiter", ok, len(l.m))
	}

	c := newCollapser(time.Second, 3)
	for i := range 100 {
		c.join([32]byte{byte(i)}, now)
	}
	if len(c.m) != 3 {
		t.Errorf("%d bursts, want at most 3", len(c.m))
	}
	if b, fresh := c.join([32]byte{200}, now); b != nil || !fresh {
		t.Errorf("a burst past max was tracked")
	}
	now = now.Add(2 * time.Second)
	if b, fresh := c.join([32]byte{201}, now); b == nil || !fresh || len(c.m) != 1 {
		t.Errorf("expired bursts were not swept: %d tracked", len(c.m))
	}
}

func TestRemoteKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"192.0.2.7:5000":                "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:5000":   "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":      "2001:db8:1:2::/64",
		"[::ffff:192.0.2.7]:5000":       "192.0.2.7",
		"@":                             "@",
		"not an address":                "not an address",
		"[fe80::1%eth0]:80":             "fe80::1%eth0",
		"[2001:db8:aaaa:bbbb::1]:65535": "2001:db8:aaaa:bbbb::/64",
	} {
		if got := remoteKey(in); got != want {
			t.Errorf("remoteKey(%q) = %q, want %q", in, got, want)
		}
	}
}
