package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/node"
)

// demoSpec is the demo's spec as stored, with the weights of web and the
// services edited by edit (nil: as seeded).
func demoSpec(t *testing.T, edit func(*config.Spec)) bannerSpec {
	t.Helper()
	spec, err := config.Parse([]byte(node.DemoSpec([]string{"127.0.0.1:9001", "127.0.0.1:9002"}, []string{"127.0.0.1:9101"})))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(spec)
	}
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var b bannerSpec
	if err := json.Unmarshal(js, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// makeRun is the banner of `make run` on a fresh database: default
// addresses, the binary as ./bin/dwara, the demo seeded as generation 1.
func makeRun(t *testing.T) bannerInfo {
	b := bannerInfo{
		Addrs:  node.Addrs{Proxy: node.DefaultListen, Admin: node.DefaultAdminListen},
		Demo:   true,
		CLI:    cliCommand("./bin/dwara", node.DefaultAdminListen, false),
		Active: &activeGeneration{ID: 1, Action: "create", Author: node.DemoAuthor, Spec: demoSpec(t, nil)},
	}
	b.DemoStable, b.DemoCanary = node.DefaultDemoPorts.Addrs()
	return b
}

func render(b bannerInfo) string {
	var buf bytes.Buffer
	banner(&buf, b)
	return buf.String()
}

// readmeBlock returns the first fenced block of README.md after the line
// that contains after.
func readmeBlock(t *testing.T, after string) string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), after)
	if !ok {
		t.Fatalf("README.md has no %q", after)
	}
	_, rest, ok = strings.Cut(rest, "```\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatalf("README.md has no fenced block after %q", after)
	}
	return block
}

// TestBannerInREADME checks that README's "Start here" shows the banner of
// `make run` on a fresh database exactly as it is printed.
func TestBannerInREADME(t *testing.T) {
	t.Parallel()
	got := strings.Trim(render(makeRun(t)), "\n") + "\n"
	if want := readmeBlock(t, "`make run` prints where everything is"); got != want {
		t.Errorf("the banner of make run is\n%s\nREADME.md shows\n%s", got, want)
	}
}

// TestBanner checks that the banner names the services of the active
// generation and suggests only commands that work on it.
func TestBanner(t *testing.T) {
	t.Parallel()
	t.Run("demo seeded", func(t *testing.T) {
		got := render(makeRun(t))
		for _, want := range []string{
			"  generation 1 is active (create by demo):\n",
			"\n    web   /      web-stable 90 / web-canary 10, sticky\n",
			"\n    shop  /shop  web-stable 90 / web-canary 10, canary analysis\n",
			"\n    curl -si http://127.0.0.1:8080/\n",
			"\n    ./bin/dwara flip web\n", "# web: blue-green, 90/10 -> 10/90\n",
			"\n    ./bin/dwara canary shop\n",
			"\n    curl -s -X POST 'http://127.0.0.1:9101/fail?rate=0.2'\n",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("the banner lacks %q:\n%s", want, got)
			}
		}
	})
	t.Run("web flipped", func(t *testing.T) {
		b := makeRun(t)
		b.Active = &activeGeneration{ID: 2, Action: "flip", Author: "alice", Spec: demoSpec(t, func(s *config.Spec) {
			ts := s.Services[0].Split.Targets
			ts[0].Weight, ts[1].Weight = ts[1].Weight, ts[0].Weight
		})}
		got := render(b)
		for _, want := range []string{"generation 2 is active (flip by alice):", "web-stable 10 / web-canary 90, sticky", "# web: blue-green, 10/90 -> 90/10\n"} {
			if !strings.Contains(got, want) {
				t.Errorf("the banner lacks %q:\n%s", want, got)
			}
		}
	})
	t.Run("demo replaced", func(t *testing.T) {
		// The README's walkthrough before it kept web: a generation
		// without the demo's services.
		b := makeRun(t)
		b.Active = &activeGeneration{ID: 3, Action: "create", Author: "alice", Spec: demoSpec(t, func(s *config.Spec) {
			s.Upstreams = []config.Upstream{{Name: "api-stable", Endpoints: []string{"10.0.0.1:80"}}, {Name: "api-canary", Endpoints: []string{"10.0.0.2:80"}}}
			s.Services = []config.Service{{Name: "api", BasePath: "/v1", Split: &config.Split{Targets: []config.Target{
				{Upstream: "api-stable", Weight: 95}, {Upstream: "api-canary", Weight: 5}}}}}
		})}
		got := render(b)
		for _, want := range []string{
			"generation 3 is active (create by alice):\n    api  /v1  api-stable 95 / api-canary 5\n",
			"no service of generation 3 routes to them",
			"--demo --reset (make demo-reset)",
			"\n    ./bin/dwara flip api\n", // it works on any 2-target split
		} {
			if !strings.Contains(got, want) {
				t.Errorf("the banner lacks %q:\n%s", want, got)
			}
		}
		for _, absent := range []string{"flip web", "canary shop", "/fail", "curl -si"} {
			if strings.Contains(got, absent) {
				t.Errorf("the banner suggests %q, which does not work on generation 3:\n%s", absent, got)
			}
		}
	})
	t.Run("no demo, no generation, another address", func(t *testing.T) {
		b := bannerInfo{Addrs: node.Addrs{Proxy: "0.0.0.0:8080", Admin: "[::]:19090"}, TLS: true,
			CLI: cliCommand("dwara", "[::]:19090", true)}
		got := render(b)
		for _, want := range []string{
			"    proxy      https://127.0.0.1:8080/\n",
			"    API        https://127.0.0.1:19090/api/v1/generations\n",
			"  no generation yet: publish a spec with dwara apply -f spec.yaml --api https://127.0.0.1:19090\n",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("the banner lacks %q:\n%s", want, got)
			}
		}
		if strings.Contains(got, "demo") || strings.Contains(got, "try") {
			t.Errorf("a banner without --demo suggests the demo:\n%s", got)
		}
	})
}
