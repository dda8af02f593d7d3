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
		Dir:           "/tmp/dwara-bench-compare-x/round1-get-nginx",
		User:          "root root",
		Workload:      mustWorkload("get"),
		Cert: certFiles{
			Cert:     "/tmp/dwara-bench-compare-x/tls/cert.pem",
			Key:      "/tmp/dwara-bench-compare-x/tls/key.pem",
			Combined: "/tmp/dwara-bench-compare-x/tls/cert-and-key.pem",
		},
	}
}

// mustWorkload returns the workload called name.
func mustWorkload(name string) workload {
	w, ok := workloadNamed(name)
	if !ok {
		panic("no workload " + name)
	}
	return w
}

// TestRenderGolden: every configuration for workload get as
// testdata/NAME.EXT, and for each other workload as
// testdata/NAME-WORKLOAD.EXT where it differs from get's (the dwara specs
// only for cache: TLS is a flag).
func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for _, c := range contestants {
		if c.conf == "" || c.conf != c.name { // another contestant's configuration
			continue
		}
		ext := map[string]string{"nginx": ".conf", "haproxy": ".cfg", "dwara": ".yaml"}[c.tool]
		for _, w := range workloads {
			t.Run(c.name+"/"+w.name, func(t *testing.T) {
				t.Parallel()
				conf := testConf()
				got, err := render(c.conf, conf)
				if err != nil {
					t.Fatal(err)
				}
				if w.name == "get" {
					golden(t, c.name+ext, got)
					return
				}
				base := got
				conf.Workload = w
				if got, err = render(c.conf, conf); err != nil {
					t.Fatal(err)
				}
				differs := string(got) != string(base)
				if want := wantDiffers(c, w); differs != want {
					t.Fatalf("%s for %s differs from get's: %v, want %v", c.name, w.name, differs, want)
				}
				if differs {
					// tlsresume sets the proxies up as tls does: only the
					// load differs.
					name := w.name
					if w.resume {
						name = "tls"
					}
					golden(t, c.name+"-"+name+ext, got)
				}
			})
		}
	}
}

// wantDiffers says whether c's configuration for w differs from get's.
// haproxy-sticky runs no cache (it is skipped for cache: skipReason).
func wantDiffers(c contestant, w workload) bool {
	switch c.tool {
	case "nginx":
		return w.tls || w.bigAnswers || w.postBytes > 0 || w.cached()
	case "haproxy":
		return w.tls || w.bigBuffers || (w.cached() && c.name == "haproxy")
	case "dwara":
		return w.cached()
	}
	return false
}

// TestRenderSendsDwarasRequestFields: nginx and HAProxy set the seven
// request fields of DESIGN section 3 that dwara sets, so that the
// upstreams do the same work behind each.
func TestRenderSendsDwarasRequestFields(t *testing.T) {
	t.Parallel()
	fields := []string{"X-Request-Id", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host",
		"X-Dwara-Service", "X-Dwara-Upstream", "X-Dwara-Generation"}
	for _, name := range []string{"nginx", "haproxy", "haproxy-sticky"} {
		got, err := render(name, testConf())
		if err != nil {
			t.Fatal(err)
		}
		text := string(got)
		for _, f := range fields {
			var ok bool
			switch {
			case name == "nginx":
				ok = strings.Contains(text, "proxy_set_header "+f+" ")
			case f == "X-Forwarded-For":
				ok = strings.Contains(text, "option forwardfor")
			case f == "X-Dwara-Upstream" && name == "haproxy-sticky":
				ok = strings.Contains(text, "http-send-name-header "+f)
			default:
				ok = strings.Contains(text, "http-request set-header "+f+" ")
			}
			if !ok {
				t.Errorf("%s does not set %s", name, f)
			}
		}
	}
	for _, w := range []string{"tls", "h2"} {
		c := testConf()
		c.Workload = mustWorkload(w)
		got, _ := render("haproxy", c)
		if !strings.Contains(string(got), "set-header X-Forwarded-Proto https") {
			t.Errorf("haproxy for %s does not send X-Forwarded-Proto https", w)
		}
	}
}

// TestRenderTLS: the TLS workloads serve TLS with the run's certificate,
// HTTP/2 only for h2, with the same cipher suite preference.
func TestRenderTLS(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		conf, workload string
		want, not      []string
	}{
		{"nginx", "tls", []string{"listen 127.0.0.1:40000 ssl;", "ssl_certificate     /tmp/dwara-bench-compare-x/tls/cert.pem;",
			"ssl_certificate_key /tmp/dwara-bench-compare-x/tls/key.pem;", "ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:"}, []string{"http2"}},
		{"nginx", "h2", []string{"listen 127.0.0.1:40000 ssl http2;"}, nil},
		{"nginx", "get", []string{"listen 127.0.0.1:40000;"}, []string{"ssl"}},
		{"haproxy", "tls", []string{"bind 127.0.0.1:40000 ssl crt /tmp/dwara-bench-compare-x/tls/cert-and-key.pem alpn http/1.1 ciphersuites TLS_AES_128_GCM_SHA256:"}, []string{"h2"}},
		{"haproxy-sticky", "h2", []string{" ssl crt ", " alpn h2,http/1.1 "}, nil},
		{"haproxy", "get", []string{"bind 127.0.0.1:40000\n"}, []string{"ssl"}},
	} {
		c := testConf()
		c.Workload = mustWorkload(tt.workload)
		got, err := render(tt.conf, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(string(got), w) {
				t.Errorf("%s for %s lacks %q", tt.conf, tt.workload, w)
			}
		}
		for _, w := range tt.not {
			if strings.Contains(string(got), w) {
				t.Errorf("%s for %s has %q", tt.conf, tt.workload, w)
			}
		}
	}
	c := testConf()
	c.Workload = mustWorkload("tls")
	c.Cert = certFiles{}
	if _, err := render("nginx", c); err == nil {
		t.Error("render of a TLS workload without certificate files succeeded")
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
		for _, w := range workloads {
			conf := testConf()
			conf.Workload = w
			got, err := render(c.conf, conf)
			if err != nil {
				t.Fatal(err)
			}
			ips := addr.FindAllString(string(got), -1)
			if len(ips) != 5 && !(c.tool == "dwara" && len(ips) == 4) {
				t.Errorf("%s %s: %d addresses %v, want the listener and four upstreams", w.name, c.name, len(ips), ips)
			}
			for _, ip := range ips {
				if ip != loopback {
					t.Errorf("%s %s: address %s is not %s", w.name, c.name, ip, loopback)
				}
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
		"pid /tmp/dwara-bench-compare-x/round1-get-nginx/nginx.pid;",
		"error_log /tmp/dwara-bench-compare-x/round1-get-nginx/error.log warn;",
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
	for _, tt := range []struct{ name, workload string }{
		{"dwara", "get"}, {"dwara-sticky", "get"}, {"dwara", "cache"}, {"dwara-sticky", "cache"},
	} {
		name := tt.name
		c := testConf()
		c.Workload = mustWorkload(tt.workload)
		text, err := render(name, c)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := config.Parse(text)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, text)
		}
		svc := spec.Services[0]
		if cached := tt.workload == "cache"; cached != (svc.Cache != nil) {
			t.Errorf("%s for %s: cache = %+v", name, tt.workload, svc.Cache)
		} else if cached && svc.Cache.MaxBytes != 64<<20 {
			t.Errorf("%s for %s: cache max_bytes %d, want 64 MiB", name, tt.workload, svc.Cache.MaxBytes)
		}
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

// TestRenderCache pins the caches of the workload cache: each holds the
// branch in its key (nginx by its key, HAProxy by a cache per backend),
// collapses concurrent misses (nginx's lock; HAProxy has no such setting)
// and may hold 64 MiB.
func TestRenderCache(t *testing.T) {
	t.Parallel()
	c := testConf()
	c.Workload = mustWorkload("cache")
	for _, tt := range []struct {
		conf string
		want []string
	}{
		{"nginx", []string{
			"proxy_cache_path /tmp/dwara-bench-compare-x/round1-get-nginx/cache levels=1:2 keys_zone=bench:10m max_size=64m inactive=1h use_temp_path=off;",
			"proxy_cache bench;", "proxy_cache_key $canary_split$host$request_uri;", "proxy_cache_lock on;",
		}},
		{"haproxy", []string{
			"backend stable\n    balance roundrobin\n    http-request cache-use cache_stable\n    http-response cache-store cache_stable\n",
			"backend canary\n    balance roundrobin\n    http-request cache-use cache_canary\n    http-response cache-store cache_canary\n",
			"cache cache_stable\n    total-max-size 32\n    max-object-size 1048576\n    max-age 3600\n",
			"cache cache_canary\n    total-max-size 32\n",
		}},
	} {
		got, err := render(tt.conf, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(string(got), w) {
				t.Errorf("%s for cache lacks %q:\n%s", tt.conf, w, got)
			}
		}
		plain, _ := render(tt.conf, testConf())
		if strings.Contains(string(plain), "cache") {
			t.Errorf("%s for get has a cache:\n%s", tt.conf, plain)
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
