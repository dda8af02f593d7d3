package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/teststat"
)

// TestFailoverBeforeDetection: a 90/10 split whose canary's only endpoint
// dies (its listener closed), with no health check to mark it down:
// every request the split sends to the canary finds its connection
// refused, so it reached nothing, and goes at once to the stable target
// (counted in dwara_split_failovers_total): under a bounded load no
// request fails from the moment the canary dies. A sticky session on the
// canary keeps its cookie throughout and is served by the canary again
// once it is back, and the request-keyed split is back at 90/10
// (chi-square at p = 0.001 over fixed request ids).
func TestFailoverBeforeDetection(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		stable := startPool(t, "stable", 2)
		canary := startPool(t, "canary", 1)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{stable, canary}, 90, 10).
			Split("app", "/app", spectest.T("stable", 90), spectest.T("canary", 10)).Sticky("sid", 0).YAML())

		// A session the split keeps on the canary: new sessions until one
		// lands there (each does with p = 0.1; 300 all miss with p < 1e-13).
		var cookie string
		for i := 0; i < 300 && cookie == ""; i++ {
			resp, _ := get(t, client, g.URL+"/app/s", nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("new session: %d", resp.StatusCode)
			}
			if resp.Header.Get("X-Pool") == "canary" {
				cookie, _, _ = strings.Cut(resp.Header.Get("Set-Cookie"), ";")
			}
		}
		if cookie == "" {
			t.Fatal("no new session landed on the canary in 300")
		}
		session := func(want string) {
			t.Helper()
			resp, _ := get(t, client, g.URL+"/app/s", map[string]string{"Cookie": cookie})
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Pool") != want {
				t.Errorf("session %s: %d from %q, want 200 from %s", cookie, resp.StatusCode, resp.Header.Get("X-Pool"), want)
			}
			if sc := resp.Header.Values("Set-Cookie"); len(sc) > 0 {
				t.Errorf("session %s: the gateway set %q, want the cookie kept", cookie, sc)
			}
		}
		session("canary")

		canary.Close()
		served := load(t, g.URL+"/", "dead", 400)
		if served["canary"] != 0 || served["stable"] != 400 {
			t.Errorf("with the canary dead: served %v, want all 400 by stable", served)
		}
		session("stable")
		failovers := 0.0
		for _, s := range g.samples(t, "dwara_split_failovers_total") {
			if s.labels["upstream"] == "canary" {
				failovers += s.value
			}
		}
		// The canary's share of 400 request ids, and the session's request.
		if failovers < 10 {
			t.Errorf("dwara_split_failovers_total of the canary = %v, want its share of the requests", failovers)
		}

		back, err := demo.StartPoolOn("canary", canary.Addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(back.Close)
		session("canary")
		const n = 2000
		served = load(t, g.URL+"/", "back", n)
		if served["stable"]+served["canary"] != n {
			t.Fatalf("with the canary back: served %v, want %d by stable and canary", served, n)
		}
		chi := teststat.ChiSquare([]int{served["stable"], served["canary"]}, []int{90, 10})
		if chi > teststat.Critical001[1] {
			t.Errorf("with the canary back: served %v, chi-square %.2f > %.3f (p = 0.001): not 90/10", served, chi, teststat.Critical001[1])
		}
		session("canary")
	})
}

// load sends n GETs to url from 4 clients at once, with the request ids
// prefix-0 .. prefix-(n-1), and returns how many each pool served (by
// its X-Pool field). Any answer other than 200 fails the test.
func load(t *testing.T, url, prefix string, n int) map[string]int {
	t.Helper()
	ids := make(chan string, n)
	for i := range n {
		ids <- fmt.Sprintf("%s-%d", prefix, i)
	}
	close(ids)
	var mu sync.Mutex
	served := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for id := range ids {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-Request-Id", id)
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("request %s: %v", id, err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("request %s: %d, want 200", id, resp.StatusCode)
				}
				mu.Lock()
				served[resp.Header.Get("X-Pool")]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return served
}
