package kubernetes

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testcert"

	corev1 "k8s.io/api/core/v1"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testnet"
)

// wait bounds every wait of TestPodsRun.
const wait = 60 * time.Second

// TestPodsRun runs the pods of the base and of the production overlay as
// the kubelet would, as processes on loopback against a database of the
// test's PostgreSQL that does not exist yet: each pod's init containers to
// completion, then its containers with their resolved environment, the
// Secrets' keys as files where the volumes mount them, and every listen
// address moved to a free loopback port. It then probes them as the
// kubelet does (HTTPS where the manifests say so), publishes a generation
// through the API by the Service's DNS name, sends a request through a
// gateway, and stops every process with SIGTERM.
func TestPodsRun(t *testing.T) {
	server := os.Getenv(dbtest.EnvURL)
	if server == "" {
		t.Skipf("%s is not set (make test sets it): the pods were not run", dbtest.EnvURL)
	}
	t.Parallel()
	for _, r := range loadRenderings(t) {
		if r.name != "base" && r.name != "production" {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			runPods(t, r, server)
		})
	}
}

func runPods(t *testing.T, r *rendering, server string) {
	// A database that `dwara migrate` (the init containers) creates.
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	name := "dwara_k8s_" + randomHex(6)
	u.Path = "/" + name
	t.Cleanup(func() {
		if !t.Failed() {
			dbtest.Exec(t, server, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
		}
	})
	secrets := fakeSecrets()
	secrets["dwara-database"]["url"] = u.String()
	secrets["dwara-api-tokens"]["admin-token"] = randomHex(16)
	secrets["dwara-api-tokens"]["read-token"] = randomHex(16)
	certPEM, keyPEM := selfSigned(t)
	for n, s := range operatorSecrets {
		if s.tls {
			secrets[n]["tls.crt"], secrets[n]["tls.key"] = certPEM, keyPEM
		}
	}

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello from the upstream")
	}))
	t.Cleanup(upstream.Close)

	api := startPod(t, r, "dwara-api", secrets)
	api.probe(t, "startup", 200)
	api.probe(t, "liveness", 200)
	// A fresh install: no generation yet, so not ready (README: publish
	// the first one through kubectl port-forward).
	api.probe(t, "readiness", 503)

	admin := api.listener(t, "admin")
	svcHost := func(host string) string { return host + ":9090" } // as a client of the Service sends it
	tokens := secrets["dwara-api-tokens"]
	spec := fmt.Sprintf(`{"message":"kubernetes test","spec":{"upstreams":[{"name":"up","endpoints":[%q]}],"services":[{"name":"all","base_path":"/","upstream":"up"}]}}`,
		strings.TrimPrefix(upstream.URL, "http://"))
	call := func(method, path, host, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, admin.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := admin.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ns := r.deploys[0].Namespace
	if code, body := call("POST", "/api/v1/generations", svcHost("dwara-api."+ns+".svc"), tokens["admin-token"], spec); code != http.StatusCreated {
		t.Fatalf("publish through the Service name: %d %s", code, body)
	}
	for _, host := range []string{"dwara-api", "dwara-api." + ns, "dwara-api." + ns + ".svc.cluster.local"} {
		if code, body := call("GET", "/api/v1/generations/current", svcHost(host), tokens["read-token"], ""); code != http.StatusOK {
			t.Errorf("GET by Host %s with the read token: %d %s", host, code, body)
		}
	}
	if code, _ := call("GET", "/api/v1/generations/current", "dwara.attacker.example", tokens["admin-token"], ""); code != http.StatusMisdirectedRequest {
		t.Errorf("GET by a foreign Host: %d, want 421", code)
	}
	// Prometheus scrapes the pod's address, which the API accepts as the
	// one it was reached on (here a loopback one).
	if code, body := call("GET", "/metrics", admin.addr, "", ""); code != http.StatusOK || !strings.Contains(body, "dwara_generation_active") {
		t.Errorf("GET /metrics by the pod's address: %d", code)
	}
	api.probe(t, "readiness", 200)

	gw := startPod(t, r, "dwara-gateway", secrets)
	gw.probe(t, "startup", 200)
	gw.probe(t, "liveness", 200)
	gw.probe(t, "readiness", 200)
	proxy := gw.listener(t, "proxy")
	if proxy.tls != r.production() {
		t.Errorf("the gateways' proxy serves TLS: %v", proxy.tls)
	}
	resp, err := proxy.client.Get(proxy.url + "/")
	if err != nil {
		t.Fatalf("GET through the gateway: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "hello from the upstream" {
		t.Errorf("GET through the gateway: %d %q", resp.StatusCode, b)
	}

	gw.stop(t)
	api.stop(t)
	if r.production() {
		for _, p := range append(api.procs, gw.procs...) {
			banner := 0
			for line := range strings.Lines(p.stderr.String()) {
				switch {
				case json.Valid([]byte(line)):
				case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "  "):
					banner++ // serve's start banner (indented), printed whatever the log format
				default:
					t.Errorf("%s logged a line that is not JSON: %q", p.name, line)
				}
			}
			if banner > 0 {
				t.Logf("note: %s wrote %d lines of its start banner among its JSON log lines", p.name, banner)
			}
		}
	}
}

// pod is a workload's pod run as processes.
type pod struct {
	w     workload
	dir   string
	ports map[int32]listenerRun // by containerPort
	procs []*proc
}

// listenerRun is one listener of a running container.
type listenerRun struct {
	listenerOf
	addr   string // where it listens in the test
	url    string // scheme://addr
	client *http.Client
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startPod runs the init containers of Deployment name to completion and
// starts its containers.
func startPod(t *testing.T, r *rendering, name string, secrets map[string]map[string]string) *pod {
	t.Helper()
	i := slices.IndexFunc(r.workloads(), func(w workload) bool { return w.kind == "Deployment" && w.name == name })
	if i < 0 {
		t.Fatalf("no Deployment %s", name)
	}
	p := &pod{w: r.workloads()[i], dir: t.TempDir(), ports: map[int32]listenerRun{}}
	for j := range p.w.pod.InitContainers {
		c := &p.w.pod.InitContainers[j]
		pr := p.start(t, c, secrets)
		select {
		case <-pr.done:
		case <-time.After(wait):
			t.Fatalf("init container %s did not finish within %v:\n%s", c.Name, wait, pr.stderr)
		}
		if pr.err != nil {
			t.Fatalf("init container %s: %v\n%s", c.Name, pr.err, pr.stderr)
		}
	}
	for j := range p.w.pod.Containers {
		p.procs = append(p.procs, p.start(t, &p.w.pod.Containers[j], secrets))
	}
	return p
}

// listenFlags are the flags that take a listen address.
var listenFlags = []string{"listen", "admin-listen", "metrics-listen"}

// start starts container c: the Secrets its volumes mount written under
// p.dir, its environment resolved, its args expanded, the mount paths and
// listen addresses in them moved into the test's reach.
func (p *pod) start(t *testing.T, c *corev1.Container, secrets map[string]map[string]string) *proc {
	t.Helper()
	env, vars, err := containerEnv(c, p.w.namespace, secrets)
	if err != nil {
		t.Fatal(err)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		vi := slices.IndexFunc(p.w.pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if vi < 0 || p.w.pod.Volumes[vi].Secret == nil && p.w.pod.Volumes[vi].EmptyDir == nil {
			t.Fatalf("mount %s: no Secret or emptyDir volume %s", m.MountPath, m.Name)
		}
		dir := filepath.Join(p.dir, c.Name, m.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		sv := p.w.pod.Volumes[vi].Secret
		if sv == nil { // an emptyDir: the directory, empty
			mounts[strings.TrimSuffix(m.MountPath, "/")+"/"] = dir + "/"
			continue
		}
		items := sv.Items
		if len(items) == 0 {
			for k := range secrets[sv.SecretName] {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			v, ok := secrets[sv.SecretName][it.Key]
			if !ok {
				t.Fatalf("Secret %s has no key %s", sv.SecretName, it.Key)
			}
			if err := os.WriteFile(filepath.Join(dir, it.Path), []byte(v), 0o440); err != nil {
				t.Fatal(err)
			}
		}
		mounts[strings.TrimSuffix(m.MountPath, "/")+"/"] = dir + "/"
	}
	var args []string
	for _, a := range c.Args {
		x, _ := expand(a, vars)
		args = append(args, x)
	}
	sub, flags, err := parseArgs(t, args)
	if err != nil {
		t.Fatal(err)
	}
	roles := listeners(sub, flags)
	for i, a := range args[1:] {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if slices.Contains(listenFlags, name) {
			_, port, err := splitHostPort(value)
			if err != nil {
				t.Fatalf("--%s=%s: %v", name, value, err)
			}
			addr := testnet.FreeAddr(t)
			args[i+1] = "--" + name + "=" + addr
			for _, l := range roles {
				if l.flag == name && slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == port }) {
					p.ports[port] = newListenerRun(l, addr)
				}
			}
			continue
		}
		for from, to := range mounts {
			if rest, ok := strings.CutPrefix(value, from); ok {
				args[i+1] = "--" + name + "=" + to + rest
			}
		}
	}
	cmd := exec.Command(binary(t), args...)
	cmd.Env = env
	pr := &proc{name: c.Name + " (" + sub + ")", cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = io.Discard, pr.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", pr.name, err)
	}
	go func() {
		pr.err = cmd.Wait()
		close(pr.done)
	}()
	t.Cleanup(func() {
		select {
		case <-pr.done:
		default:
			_ = cmd.Process.Kill()
			<-pr.done
		}
		if t.Failed() {
			t.Logf("%s logged:\n%s", pr.name, pr.stderr)
		}
	})
	return pr
}

func newListenerRun(l listenerOf, addr string) listenerRun {
	scheme := "http"
	if l.tls {
		scheme = "https"
	}
	return listenerRun{listenerOf: l, addr: addr, url: scheme + "://" + addr, client: &http.Client{
		Timeout: 5 * time.Second,
		// As the kubelet, which does not verify a probe's certificate.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

// listener returns the pod's listener of role.
func (p *pod) listener(t *testing.T, role string) listenerRun {
	t.Helper()
	for _, l := range p.ports {
		if l.role == role {
			return l
		}
	}
	t.Fatalf("%s has no %s listener", p.w, role)
	return listenerRun{}
}

// probe runs the kind probe of the pod's first container as the kubelet
// does (GET, Host the address, success 200-399) until it answers want,
// within wait.
func (p *pod) probe(t *testing.T, kind string, want int) {
	t.Helper()
	c := &p.w.pod.Containers[0]
	pr := map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}[kind]
	port, ok := containerPort(c, pr.HTTPGet.Port)
	if !ok {
		t.Fatalf("%s probe: no port %s", kind, pr.HTTPGet.Port.String())
	}
	l, ok := p.ports[port]
	if !ok {
		t.Fatalf("%s probe: port %d is no listener of the process", kind, port)
	}
	scheme := strings.ToLower(string(pr.HTTPGet.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	target := scheme + "://" + l.addr + pr.HTTPGet.Path
	deadline := time.Now().Add(wait)
	last := "no answer"
	for {
		if p.procs[0].exited() {
			t.Fatalf("%s exited (%v) before its %s probe answered %d", p.procs[0].name, p.procs[0].err, kind, want)
		}
		resp, err := l.client.Get(target)
		if err == nil {
			code := resp.StatusCode
			resp.Body.Close()
			if code == want {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s probe GET %s: %s, want %d within %v", kind, target, last, want, wait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (pr *proc) exited() bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to every container, as the kubelet does after the
// preStop hook, and expects each to exit 0 within the rest of the grace
// period.
func (p *pod) stop(t *testing.T) {
	t.Helper()
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if g := p.w.pod.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	for i, pr := range p.procs {
		if c := p.w.pod.Containers[i]; c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			grace -= time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
		if err := pr.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM %s: %v", pr.name, err)
			continue
		}
		select {
		case <-pr.done:
			if pr.err != nil {
				var exit *exec.ExitError
				if errors.As(pr.err, &exit) {
					t.Errorf("%s exited %d after SIGTERM", pr.name, exit.ExitCode())
				} else {
					t.Errorf("%s: %v", pr.name, pr.err)
				}
			}
		case <-time.After(grace):
			t.Errorf("%s did not exit within %v of SIGTERM: the kubelet would kill it", pr.name, grace)
		}
	}
}

// selfSigned returns a PEM certificate and key for the API's Service names
// and loopback.
func selfSigned(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	c, k, _ := testcert.New(t, "dwara-api", "dwara-api", "dwara-api.dwara.svc", "localhost")
	return string(c), string(k)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
