package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dwara/dwara/gateway/config"
)

func testConf() proxyConf {
	return proxyConf{
		Listen:        40000,
		Pools:         pools{Stable: [2]int{40001, 40002}, Canary: [2]int{40003, 40004}},
		CanaryPercent: 5,
		Dir:           "/tmp/dwara-bench-compare-x/round1-nginx",
		User:          "root root",
	}
}

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for _, c := range contestants {
		if c.conf == "" || c.conf != c.name { // another contestant's configuration
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := render(c.conf, testConf())
			if err != nil {
				t.Fatal(err)
			}
			ext := map[string]string{"nginx": ".conf", "haproxy": ".cfg", "dwara": ".yaml"}[c.tool]
			golden(t, c.name+ext, got)
		})
	}
}

// TestRenderLoopbackOnly: every address in every configuration is on
// 127.0.0.1.
func TestRenderLoopbackOnly(t *testing.T) {
	t.Parallel()
	addr := regexp.MustCompile(`\b\d+\.\d+\.\d+\.\d+\b`)
	for _, c := range contestants {
		if c.conf == "" {
			continue
		}
		got, err := render(c.conf, testConf())
		if err != nil {
			t.Fatal(err)
		}
		ips := addr.FindAllString(string(got), -1)
		if len(ips) != 5 && !(c.tool == "dwara" && len(ips) == 4) {
			t.Errorf("%s: %d addresses %v, want the listener and four upstreams", c.name, len(ips), ips)
		}
		for _, ip := range ips {
			if ip != loopback {
				t.Errorf("%s: address %s is not %s", c.name, ip, loopback)
			}
		}
	}
}

// TestRenderNginxAsTheSharedHarness pins the directives that make the
// comparison fair.
func TestRenderNginxAsTheSharedHarness(t *testing.T) {
	t.Parallel()
	got, err := render("nginx", testConf())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"worker_processes 2;", "daemon off;", "master_process on;",
		"pid /tmp/dwara-bench-compare-x/round1-nginx/nginx.pid;",
		"error_log /tmp/dwara-bench-compare-x/round1-nginx/error.log warn;",
		"access_log off;", "keepalive_requests 100000;", `split_clients "${request_id}" $canary_split`,
		"5% canary;", "keepalive 64;", "proxy_http_version 1.1;", `proxy_set_header Connection "";`,
		"user root root;",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("nginx.conf lacks %q", want)
		}
	}
	c := testConf()
	c.User = ""
	got, _ = render("nginx", c)
	if strings.Contains(string(got), "user ") {
		t.Errorf("nginx.conf without User has a user directive:\n%s", got)
	}
}

func TestRenderHAProxyWeights(t *testing.T) {
	t.Parallel()
	c := testConf()
	c.CanaryPercent = 10
	got, err := render("haproxy", c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "use_backend canary if { rand(100) lt 10 }") || !strings.Contains(string(got), "nbthread 2") {
		t.Errorf("haproxy.cfg:\n%s", got)
	}
	got, err = render("haproxy-sticky", c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cookie SRV insert indirect nocache", ":40001 weight 90 cookie s1", ":40004 weight 10 cookie c2"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("haproxy-sticky.cfg lacks %q:\n%s", want, got)
		}
	}
}

// TestRenderDwaraSpecIsValid decodes the dwara specs with the gateway's own
// decoder and validation.
func TestRenderDwaraSpecIsValid(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"dwara", "dwara-sticky"} {
		text, err := render(name, testConf())
		if err != nil {
			t.Fatal(err)
		}
		spec, err := config.Parse(text)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, text)
		}
		svc := spec.Services[0]
		if svc.Split == nil || len(svc.Split.Targets) != 2 || svc.Split.Targets[0].Weight != 95 || svc.Split.Targets[1].Weight != 5 {
			t.Errorf("%s: split = %+v, want stable 95 / canary 5", name, svc.Split)
		}
		if sticky := name == "dwara-sticky"; sticky != (svc.Sticky != nil) {
			t.Errorf("%s: sticky = %+v", name, svc.Sticky)
		} else if sticky && svc.Sticky.Cookie != dwaraCookie {
			t.Errorf("%s: cookie %q, want %q", name, svc.Sticky.Cookie, dwaraCookie)
		}
	}
}

func TestRenderRefusesBadPercent(t *testing.T) {
	t.Parallel()
	for _, pct := range []int{0, 100} {
		c := testConf()
		c.CanaryPercent = pct
		if _, err := render("nginx", c); err == nil {
			t.Errorf("render with canary %d%% succeeded", pct)
		}
	}
}
