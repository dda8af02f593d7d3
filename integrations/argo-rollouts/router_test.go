package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsPlugin "github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goPlugin "github.com/hashicorp/go-plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// wait bounds every wait of the test for something to happen.
const wait = 90 * time.Second

var (
	buildOnce           sync.Once
	dwaraBin, pluginBin string
	buildErr            error
	binDir              string
)

// build builds the dwara binary of the repository and this plugin, once.
func build(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "dwara-argo-")
		if buildErr != nil {
			return
		}
		dwaraBin, pluginBin = filepath.Join(binDir, "dwara"), filepath.Join(binDir, "dwara-argo-rollouts")
		for _, b := range []struct{ dir, out string }{{"../../cmd/dwara", dwaraBin}, {".", pluginBin}} {
			cmd := exec.Command("go", "build", "-o", b.out, ".")
			cmd.Dir = b.dir
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b.dir, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// database creates a database of its own on the server of
// DWARA_TEST_DATABASE_URL (migrated by dwara migrate) and drops it when the
// test ends.
func database(t *testing.T) string {
	t.Helper()
	base := os.Getenv("DWARA_TEST_DATABASE_URL")
	if base == "" {
		t.Skip("DWARA_TEST_DATABASE_URL is not set (make test-integrations sets it)")
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("no psql to drop the test's database with")
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "dwara_argo_" + hex.EncodeToString(b[:])
	u.Path = "/" + name
	if out, err := exec.Command(dwaraBin, "migrate", "--database-url", u.String()).CombinedOutput(); err != nil {
		t.Fatalf("dwara migrate: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		admin := *u
		admin.Path = "/postgres"
		if out, err := exec.Command(psql, admin.String(), "-c", "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)").CombinedOutput(); err != nil {
			t.Errorf("drop %s: %v\n%s", name, err, out)
		}
	})
	return u.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs the dwara binary with args until the test ends.
func start(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(dwaraBin, args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("dwara %s:\n%s", args[0], log.String())
		}
	})
}

// eventually polls cond until it holds, failing the test after wait.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", wait, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pool is an upstream that names itself in its answers.
func pool(t *testing.T, name string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Pool", name)
		io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// share sends n requests with fresh request ids (and headers h) through
// the gateway at addr and returns how many the canary served.
func share(t *testing.T, addr string, n int, h map[string]string) int {
	t.Helper()
	canary := 0
	for i := range n {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Header.Set("X-Request-Id", fmt.Sprintf("argo-%d-%d", n, i))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		if resp.Header.Get("X-Pool") == "canary" {
			canary++
		}
	}
	return canary
}

// TestRolloutThroughThePlugin runs the plugin binary the way Argo Rollouts
// does (go-plugin's client with Argo Rollouts' own RPC types) against a
// real dwara serve and gateway, and drives a canary 10 -> 50 -> 100 with a
// header route, then an abort.
func TestRolloutThroughThePlugin(t *testing.T) {
	build(t)
	dbURL := database(t)
	admin, proxy, gwProxy := freeAddr(t), freeAddr(t), freeAddr(t)
	start(t, "serve", "--database-url", dbURL, "--admin-listen", admin, "--listen", proxy)
	start(t, "gateway", "--database-url", dbURL, "--listen", gwProxy, "--metrics-listen", freeAddr(t), "--state-dir", "none")
	api := "http://" + admin

	spec := map[string]any{
		"upstreams": []any{
			map[string]any{"name": "stable", "endpoints": []string{pool(t, "stable")}},
			map[string]any{"name": "canary", "endpoints": []string{pool(t, "canary")}},
			map[string]any{"name": "shadow", "endpoints": []string{pool(t, "shadow")}},
		},
		"services": []any{map[string]any{
			"name": "shop", "base_path": "/",
			"split": map[string]any{
				"targets":    []any{map[string]any{"upstream": "stable", "weight": 100}, map[string]any{"upstream": "canary", "weight": 0}},
				"managed_by": ManagedBy,
			},
		}},
	}
	eventually(t, "the API answers", func() bool {
		resp, err := http.Get(api + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	body, _ := json.Marshal(map[string]any{"message": "shop at 100/0", "spec": spec})
	resp, err := http.Post(api+"/api/v1/generations", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish: %d %s", resp.StatusCode, b)
	}
	resp.Body.Close()

	// The plugin, as Argo Rollouts loads it.
	client := goPlugin.NewClient(&goPlugin.ClientConfig{
		HandshakeConfig:  handshake,
		Plugins:          map[string]goPlugin.Plugin{"RpcTrafficRouterPlugin": &rolloutsPlugin.RpcTrafficRouterPlugin{}},
		Cmd:              exec.Command(pluginBin),
		AllowedProtocols: []goPlugin.Protocol{goPlugin.ProtocolNetRPC},
	})
	t.Cleanup(client.Kill)
	rpcClient, err := client.Client()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rpcClient.Dispense("RpcTrafficRouterPlugin")
	if err != nil {
		t.Fatal(err)
	}
	plugin := raw.(rolloutsPlugin.TrafficRouterPlugin)
	if e := plugin.InitPlugin(); e.HasError() {
		t.Fatal(e)
	}
	if got := plugin.Type(); got != PluginName {
		t.Errorf("Type() = %q, want %q", got, PluginName)
	}
	cfg, _ := json.Marshal(Config{API: api, Service: "shop", StableUpstream: "stable", CanaryUpstream: "canary", MirrorUpstream: "shadow"})
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "shop"},
		Spec: v1alpha1.RolloutSpec{Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{
			TrafficRouting: &v1alpha1.RolloutTrafficRouting{Plugins: map[string]json.RawMessage{PluginName: cfg}},
		}}},
	}

	step := func(weight int32) {
		t.Helper()
		if e := plugin.SetWeight(ro, weight, nil); e.HasError() {
			t.Fatalf("SetWeight(%d): %v", weight, e)
		}
		eventually(t, fmt.Sprintf("VerifyWeight(%d)", weight), func() bool {
			v, e := plugin.VerifyWeight(ro, weight, nil)
			if e.HasError() {
				t.Fatalf("VerifyWeight(%d): %v", weight, e)
			}
			return v == types.Verified
		})
	}
	// 2,000 requests at a share p: within 6 standard deviations of n*p
	// (a false failure about once in 10^9 runs), exact at 0 and 100%.
	within := func(got, n int, p float64) bool {
		mean, sd := float64(n)*p, 6*math.Sqrt(float64(n)*p*(1-p))
		return float64(got) >= mean-sd && float64(got) <= mean+sd
	}
	const n = 2000

	step(10)
	for _, addr := range []string{proxy, gwProxy} {
		if got := share(t, addr, n, nil); !within(got, n, 0.10) {
			t.Errorf("at 10%%: the canary served %d of %d through %s", got, n, addr)
		}
	}
	// A header route: exactly the requests with the header go to the canary.
	hr := &v1alpha1.SetHeaderRoute{Name: "testers", Match: []v1alpha1.HeaderRoutingMatch{{HeaderName: "X-Canary", HeaderValue: &v1alpha1.StringMatch{Exact: "yes"}}}}
	if e := plugin.SetHeaderRoute(ro, hr); e.HasError() {
		t.Fatalf("SetHeaderRoute: %v", e)
	}
	step(10) // the header route's generation is applied everywhere too
	for _, addr := range []string{proxy, gwProxy} {
		if got := share(t, addr, 500, map[string]string{"X-Canary": "yes"}); got != 500 {
			t.Errorf("with the header: the canary served %d of 500 through %s", got, addr)
		}
		if got := share(t, addr, n, map[string]string{"X-Canary": "no"}); !within(got, n, 0.10) {
			t.Errorf("without the header: the canary served %d of %d through %s", got, n, addr)
		}
	}
	if e := plugin.SetMirrorRoute(ro, &v1alpha1.SetMirrorRoute{Name: "shadow", Percentage: ptr(int32(20))}); e.HasError() {
		t.Fatalf("SetMirrorRoute: %v", e)
	}
	if e := plugin.SetMirrorRoute(ro, &v1alpha1.SetMirrorRoute{Name: "m", Match: []v1alpha1.RouteMatch{{Method: &v1alpha1.StringMatch{Exact: "GET"}}}}); !e.HasError() || !strings.Contains(e.Error(), "match conditions are not supported") {
		t.Errorf("a mirror route with a match: %v", e)
	}
	step(50)
	step(100)
	if got := share(t, gwProxy, 500, nil); got != 500 {
		t.Errorf("at 100%%: the canary served %d of 500", got)
	}

	// Abort: back to stable, and every route the plugin added removed.
	step(0)
	if e := plugin.RemoveManagedRoutes(ro); e.HasError() {
		t.Fatalf("RemoveManagedRoutes: %v", e)
	}
	step(0)
	if got := share(t, gwProxy, 500, map[string]string{"X-Canary": "yes"}); got != 0 {
		t.Errorf("after the abort: the canary served %d of 500 with the header", got)
	}
	var cur struct {
		Spec struct {
			Services []struct {
				Split  map[string]any `json:"split"`
				Mirror any            `json:"mirror"`
			} `json:"services"`
		} `json:"spec"`
	}
	resp, err = http.Get(api + "/api/v1/generations/current")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&cur)
	resp.Body.Close()
	if s := cur.Spec.Services[0]; s.Split["match"] != nil || s.Mirror != nil {
		t.Errorf("after RemoveManagedRoutes the service still has %v, mirror %v", s.Split["match"], s.Mirror)
	}

	// A split Dwara's controller still judges is refused with the reason.
	spec["services"].([]any)[0].(map[string]any)["split"].(map[string]any)["managed_by"] = ""
	body, _ = json.Marshal(map[string]any{"message": "not managed", "spec": spec})
	if resp, err := http.Post(api+"/api/v1/generations", "application/json", bytes.NewReader(body)); err == nil {
		resp.Body.Close()
	}
	if e := plugin.SetWeight(ro, 10, nil); !e.HasError() || !strings.Contains(e.Error(), "managed_by: argo-rollouts") {
		t.Errorf("SetWeight on a split not managed by Argo Rollouts: %v", e)
	}
}

func ptr[T any](v T) *T { return &v }
