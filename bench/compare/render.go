package main

import (
	"bytes"
	"fmt"
	"text/template"
)

// pools are the four upstreams every contestant proxies to: two stable and
// two canary, as ports on 127.0.0.1.
type pools struct {
	Stable [2]int
	Canary [2]int
}

// proxyConf is what a contestant's configuration is rendered from.
type proxyConf struct {
	// Listen is the port the proxy listens on, on 127.0.0.1.
	Listen int
	Pools  pools
	// CanaryPercent is the share of requests for the canary pool, 1..99.
	CanaryPercent int
	// Dir is nginx's prefix directory (pid, logs, temp files); unused by the
	// others.
	Dir string
	// User, when not empty, is rendered as nginx's `user` directive so that
	// workers keep running as the invoking user when that user is root
	// (nginx otherwise drops them to nobody).
	User string
	// Workload is what the load generator sends; some workloads change
	// nginx's and HAProxy's settings (see the templates).
	Workload workload
	// Cert holds the run's certificate files; used when the workload is
	// served over TLS.
	Cert certFiles
}

// TLS, H2, BigAnswers, Bodies, BigBuffers, Cache and Scheme are the
// workload's settings, for the templates.
func (c proxyConf) TLS() bool        { return c.Workload.tls }
func (c proxyConf) H2() bool         { return c.Workload.h2 }
func (c proxyConf) BigAnswers() bool { return c.Workload.bigAnswers }
func (c proxyConf) Bodies() bool     { return c.Workload.postBytes > 0 }
func (c proxyConf) BigBuffers() bool { return c.Workload.bigBuffers }
func (c proxyConf) Cache() bool      { return c.Workload.cached() }
func (c proxyConf) Scheme() string   { return c.Workload.scheme() }

// cacheBytes is what each contestant may hold in its cache for the
// workload cache: dwara's max_bytes, nginx's max_size, HAProxy's two caches
// of half each; far more than the workload's 200 answers (100 URLs on each
// branch) weigh, so nothing is evicted.
const cacheBytes = 64 << 20

// StableWeight is the stable share, 100-CanaryPercent.
func (c proxyConf) StableWeight() int { return 100 - c.CanaryPercent }

// Host is the only address a rendered configuration ever uses.
func (proxyConf) Host() string { return loopback }

// confTemplateText holds one template per contestant configuration.
const confTemplateText = `
{{- define "nginx" -}}
# Written by bench/compare. Started as: nginx -p DIR -c DIR/nginx.conf -e DIR/error.log
{{- if .User}}
user {{.User}};
{{- end}}
worker_processes 2;
daemon off;
master_process on;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path {{.Dir}}/tmp/client;
    proxy_temp_path       {{.Dir}}/tmp/proxy;
    fastcgi_temp_path     {{.Dir}}/tmp/fastcgi;
    uwsgi_temp_path       {{.Dir}}/tmp/uwsgi;
    scgi_temp_path        {{.Dir}}/tmp/scgi;
    # wrk keeps its connections open; the default of 1000 requests per
    # client connection would make it reconnect (haproxy has no such cap).
    keepalive_requests 100000;
{{- if .BigAnswers}}
    # Answers over the stock 8 x 4 KiB proxy buffers: 64 KiB reads, and
    # never spooled to a temp file (memory only, as the others).
    proxy_buffer_size 64k;
    proxy_buffers 8 64k;
    proxy_busy_buffers_size 128k;
    proxy_max_temp_file_size 0;
{{- end}}
{{- if .Bodies}}
    # Request bodies up to 2 MiB, buffered in memory rather than in
    # client_body_temp_path files.
    client_max_body_size 2m;
    client_body_buffer_size 1m;
{{- end}}
{{- if .Cache}}
    # The proxy cache: the answers in files under DIR/cache (read and
    # written through the page cache), their keys in a shared-memory zone
    # of the two workers; as much as dwara's max_bytes.
    proxy_cache_path {{.Dir}}/cache levels=1:2 keys_zone=bench:10m max_size={{cacheMiB}}m inactive=1h use_temp_path=off;
{{- end}}

    # Per-request split: $request_id is 32 random hex characters per request,
    # hashed by split_clients into the percentage buckets.
    split_clients "${request_id}" $canary_split {
        {{.CanaryPercent}}% canary;
        *   stable;
    }
    upstream stable {
        server {{.Host}}:{{index .Pools.Stable 0}};
        server {{.Host}}:{{index .Pools.Stable 1}};
        keepalive 64;
        keepalive_requests 100000;
    }
    upstream canary {
        server {{.Host}}:{{index .Pools.Canary 0}};
        server {{.Host}}:{{index .Pools.Canary 1}};
        keepalive 16;
        keepalive_requests 100000;
    }
    server {
        listen {{.Host}}:{{.Listen}}{{if .TLS}} ssl{{if .H2}} http2{{end}}{{end}};
{{- if .TLS}}
        ssl_certificate     {{.Cert.Cert}};
        ssl_certificate_key {{.Cert.Key}};
        # TLS 1.3 as every contestant: nginx before 1.23.4 (Debian 12's
        # 1.22) leaves it out of its default protocols.
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_conf_command Ciphersuites {{tls13Suites}};
        ssl_prefer_server_ciphers on;
{{- end}}
        location / {
            proxy_pass http://$canary_split;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # The seven request fields dwara sets (DESIGN section 3), so
            # that the upstreams do the same work behind both.
            proxy_set_header X-Request-Id $request_id;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Host $http_host;
            proxy_set_header X-Dwara-Service bench;
            proxy_set_header X-Dwara-Upstream $canary_split;
            proxy_set_header X-Dwara-Generation 1;
{{- if .Cache}}
            proxy_cache bench;
            # The key holds the branch, as dwara's: the pool split_clients
            # chose, then the host and the request target.
            proxy_cache_key $canary_split$host$request_uri;
            # Concurrent misses of a key make one upstream request, as
            # dwara's; the freshness is the answer's Cache-Control.
            proxy_cache_lock on;
            add_header X-Cache $upstream_cache_status;
{{- end}}
        }
    }
}
{{end}}

{{- define "haproxy-head" -}}
# Written by bench/compare. Started as: haproxy -db -f FILE
global
    nbthread 2
    maxconn 4096
{{- if .BigBuffers}}
    # payloads over the stock 16 KiB buffer: 64 KiB buffers
    tune.bufsize 65536
{{- end}}
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 30s
    http-reuse safe
frontend fe
    bind {{.Host}}:{{.Listen}}{{if .TLS}} ssl crt {{.Cert.Combined}} alpn {{if .H2}}h2,{{end}}http/1.1 ciphersuites {{tls13Suites}}{{end}}
    # The request fields dwara sets (DESIGN section 3), so that the
    # upstreams do the same work behind both; X-Dwara-Upstream is set by
    # the backend.
    option forwardfor
    http-request set-header X-Request-Id %[uuid]
    http-request set-header X-Forwarded-Proto {{.Scheme}}
    http-request set-header X-Forwarded-Host %[req.hdr(host)]
    http-request set-header X-Dwara-Service bench
    http-request set-header X-Dwara-Generation 1
{{- end}}

{{- define "haproxy" -}}
{{template "haproxy-head" .}}
    # Per-request weighted random: rand(100) is uniform in 0..99.
    use_backend canary if { rand(100) lt {{.CanaryPercent}} }
    default_backend stable
backend stable
    balance roundrobin
{{- if .Cache}}
    http-request cache-use cache_stable
    http-response cache-store cache_stable
{{- end}}
    http-request set-header X-Dwara-Upstream stable
    server s1 {{.Host}}:{{index .Pools.Stable 0}}
    server s2 {{.Host}}:{{index .Pools.Stable 1}}
backend canary
    balance roundrobin
{{- if .Cache}}
    http-request cache-use cache_canary
    http-response cache-store cache_canary
{{- end}}
    http-request set-header X-Dwara-Upstream canary
    server c1 {{.Host}}:{{index .Pools.Canary 0}}
    server c2 {{.Host}}:{{index .Pools.Canary 1}}
{{- if .Cache}}
# One cache per backend: HAProxy's key is the host and the request target
# only, so a backend of its own is what makes it hold the branch (as
# dwara's). Half of dwara's max_bytes each; max-age caps the answer's own.
cache cache_stable
    total-max-size {{halfCacheMiB}}
    max-object-size 1048576
    max-age 3600
cache cache_canary
    total-max-size {{halfCacheMiB}}
    max-object-size 1048576
    max-age 3600
{{- end}}
{{end}}

{{- define "haproxy-sticky" -}}
{{template "haproxy-head" .}}
    default_backend split
backend split
    # Smooth weighted round robin over four servers; a client without the
    # cookie gets the next server and a Set-Cookie naming it, a client that
    # sends SRV=<id> sticks to that server.
    balance roundrobin
    cookie SRV insert indirect nocache
    # the chosen server's name (s1..c2): the pool is known only then
    http-send-name-header X-Dwara-Upstream
    server s1 {{.Host}}:{{index .Pools.Stable 0}} weight {{.StableWeight}} cookie s1
    server s2 {{.Host}}:{{index .Pools.Stable 1}} weight {{.StableWeight}} cookie s2
    server c1 {{.Host}}:{{index .Pools.Canary 0}} weight {{.CanaryPercent}} cookie c1
    server c2 {{.Host}}:{{index .Pools.Canary 1}} weight {{.CanaryPercent}} cookie c2
{{end}}

{{- define "dwara-head" -}}
# Written by bench/compare. Started as: dwara gateway --config FILE
upstreams:
  - {name: stable, endpoints: ["{{.Host}}:{{index .Pools.Stable 0}}", "{{.Host}}:{{index .Pools.Stable 1}}"]}
  - {name: canary, endpoints: ["{{.Host}}:{{index .Pools.Canary 0}}", "{{.Host}}:{{index .Pools.Canary 1}}"]}
services:
  - name: bench
    split:
      targets:
        - {upstream: stable, weight: {{.StableWeight}}}
        - {upstream: canary, weight: {{.CanaryPercent}}}
{{- if .Cache}}
    cache: {max_bytes: {{cacheBytes}}}
{{- end}}
{{- end}}

{{- define "dwara" -}}
{{template "dwara-head" .}}
{{end}}

{{- define "dwara-sticky" -}}
{{template "dwara-head" .}}
    sticky: {cookie: {{stickyCookie}}}
{{end}}
`

var confTemplates = template.Must(template.New("").Option("missingkey=error").
	Funcs(template.FuncMap{
		"stickyCookie": func() string { return dwaraCookie },
		"tls13Suites":  func() string { return tls13Suites },
		"cacheBytes":   func() int { return cacheBytes },
		"cacheMiB":     func() int { return cacheBytes >> 20 },
		"halfCacheMiB": func() int { return cacheBytes >> 21 },
	}).
	Parse(confTemplateText))

// render renders the configuration template name ("nginx", "haproxy",
// "haproxy-sticky", "dwara", "dwara-sticky") for c.
func render(name string, c proxyConf) ([]byte, error) {
	if c.CanaryPercent < 1 || c.CanaryPercent > 99 {
		return nil, fmt.Errorf("render %s: canary percent %d is not 1..99", name, c.CanaryPercent)
	}
	if c.Workload.name == "" {
		return nil, fmt.Errorf("render %s: no workload", name)
	}
	if c.Workload.tls && (c.Cert.Cert == "" || c.Cert.Key == "" || c.Cert.Combined == "") {
		return nil, fmt.Errorf("render %s: workload %s needs the certificate files", name, c.Workload.name)
	}
	var b bytes.Buffer
	if err := confTemplates.ExecuteTemplate(&b, name, c); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return b.Bytes(), nil
}
