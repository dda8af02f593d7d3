// Package kubernetes holds Dwara's Kubernetes manifests (a kustomize base,
// components and overlays) and their tests. It has no code of its own:
// apply an overlay with `kubectl apply -k deploy/kubernetes/overlays/production`
// (README.md).
//
// The tests render every kustomization without a cluster (render_test.go),
// decode every object strictly into its k8s.io/api type, and check the
// manifests against the real binary, built from this module: every flag is
// one `dwara serve|gateway|migrate -h` lists and takes its value, every
// environment variable is one the binary (or the Go runtime) reads, probes
// and ports land on the listener the flags configure, and Services, the
// HorizontalPodAutoscaler, the PodDisruptionBudgets, the NetworkPolicies
// and the ServiceMonitors select what they should. TestPodsRun (run_test.go)
// then runs the rendered pods' containers as processes against PostgreSQL
// and probes them as the kubelet would.
package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
)

// subcommands are the dwara commands a container may run.
var subcommands = []string{"serve", "gateway", "migrate"}

// operatorSecrets are the Secrets the operator creates before the first
// apply (README.md says how), with their keys.
var operatorSecrets = map[string]struct {
	keys []string
	tls  bool // type kubernetes.io/tls
}{
	"dwara-database":    {keys: []string{"url"}},
	"dwara-api-tokens":  {keys: []string{"admin-token", "read-token"}},
	"dwara-gateway-tls": {keys: []string{"tls.crt", "tls.key"}, tls: true},
	"dwara-api-tls":     {keys: []string{"tls.crt", "tls.key"}, tls: true},
	// The CA that issued dwara-api-tls, for Prometheus to verify the API
	// (production-monitoring's ServiceMonitor).
	"dwara-api-ca": {keys: []string{"ca.crt"}},
}

// Labels of the NetworkPolicies' allowed peers.
const (
	adminClientLabel  = "dwara.io/admin-client"
	monitoringNSLabel = "kubernetes.io/metadata.name"
	monitoringNS      = "monitoring"
)

// renderingSpec names one kustomization to render: dir under
// deploy/kubernetes, and optionally components added to it (in a copy of
// the tree), as the README tells an operator to add them.
type renderingSpec struct {
	name       string
	dir        string
	components []string
}

var renderingSpecs = []renderingSpec{
	{name: "base", dir: "base"},
	{name: "production", dir: "overlays/production"},
	{name: "production-monitoring", dir: "overlays/production-monitoring"},
	{name: "production+migration-job", dir: "overlays/production", components: []string{"../../components/migration-job"}},
}

// production reports whether the rendering is of the production overlay.
func (s renderingSpec) production() bool { return strings.HasPrefix(s.name, "production") }

// rendering is one rendered kustomization, decoded.
type rendering struct {
	renderingSpec
	root     string // the directory rendered (in a copy of the tree when components were added)
	objs     []object
	typed    []any
	deploys  []*appsv1.Deployment
	jobs     []*batchv1.Job
	services []*corev1.Service
	hpas     []*autoscalingv2.HorizontalPodAutoscaler
	pdbs     []*policyv1.PodDisruptionBudget
	netpols  []*networkingv1.NetworkPolicy
	monitors []*serviceMonitor
	rules    []*prometheusRule
	nss      []*corev1.Namespace
}

// scrapeTLS is a ServiceMonitor endpoint's tlsConfig.
type scrapeTLS struct {
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	CA                 *struct {
		Secret *corev1.SecretKeySelector `json:"secret,omitempty"`
	} `json:"ca,omitempty"`
	ServerName string `json:"serverName,omitempty"`
}

// prometheusRule is the part of a Prometheus Operator PrometheusRule
// (monitoring.coreos.com/v1) these manifests use; any other field fails
// the strict decoding. deploy/prometheus's TestPrometheusRuleInSync checks
// that its groups are those of deploy/prometheus/dwara.rules.yml.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Record      string            `json:"record,omitempty"`
				Alert       string            `json:"alert,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// serviceMonitor is the part of a Prometheus Operator ServiceMonitor
// (monitoring.coreos.com/v1) these manifests use; any other field fails the
// strict decoding.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port          string     `json:"port"`
			Path          string     `json:"path"`
			Scheme        string     `json:"scheme"`
			Interval      string     `json:"interval"`
			ScrapeTimeout string     `json:"scrapeTimeout"`
			TLSConfig     *scrapeTLS `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// workload is a pod template of a Deployment or a Job.
type workload struct {
	kind, name, namespace string
	labels                map[string]string
	pod                   *corev1.PodSpec
	replicas              *int32 // Deployments
}

func (r *rendering) workloads() []workload {
	var ws []workload
	for _, d := range r.deploys {
		ws = append(ws, workload{"Deployment", d.Name, d.Namespace, d.Spec.Template.Labels, &d.Spec.Template.Spec, d.Spec.Replicas})
	}
	for _, j := range r.jobs {
		ws = append(ws, workload{"Job", j.Name, j.Namespace, j.Spec.Template.Labels, &j.Spec.Template.Spec, nil})
	}
	return ws
}

// containers returns the init containers and containers of w.
func (w workload) containers() []*corev1.Container {
	var cs []*corev1.Container
	for i := range w.pod.InitContainers {
		cs = append(cs, &w.pod.InitContainers[i])
	}
	for i := range w.pod.Containers {
		cs = append(cs, &w.pod.Containers[i])
	}
	return cs
}

func (w workload) String() string { return w.kind + "/" + w.name }

// moduleRoot is the root of the module (two levels up).
var moduleRoot = sync.OnceValues(func() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("no go.mod two levels up: %w", err)
	}
	return root, nil
})

// tempRoot holds what the tests build (the binary, copies of the tree);
// TestMain removes it.
var tempRoot = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "dwara-kubernetes-test-") })

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := tempRoot(); err == nil {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}

// renderings renders and decodes every renderingSpec once.
var renderings = sync.OnceValues(func() ([]*rendering, error) {
	var rs []*rendering
	for _, s := range renderingSpecs {
		root, err := specRoot(s)
		if err != nil {
			return nil, err
		}
		objs, err := render(root)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		r := &rendering{renderingSpec: s, root: root, objs: objs}
		for _, o := range objs {
			v, err := decodeTyped(o)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %s/%s: %w", s.name, apiVersionOf(o), kindOf(o), nameOf(o), err)
			}
			r.typed = append(r.typed, v)
			switch v := v.(type) {
			case *appsv1.Deployment:
				r.deploys = append(r.deploys, v)
			case *batchv1.Job:
				r.jobs = append(r.jobs, v)
			case *corev1.Service:
				r.services = append(r.services, v)
			case *autoscalingv2.HorizontalPodAutoscaler:
				r.hpas = append(r.hpas, v)
			case *policyv1.PodDisruptionBudget:
				r.pdbs = append(r.pdbs, v)
			case *networkingv1.NetworkPolicy:
				r.netpols = append(r.netpols, v)
			case *serviceMonitor:
				r.monitors = append(r.monitors, v)
			case *prometheusRule:
				r.rules = append(r.rules, v)
			case *corev1.Namespace:
				r.nss = append(r.nss, v)
			}
		}
		rs = append(rs, r)
	}
	return rs, nil
})

// specRoot returns the directory to render for s: its own, or that of a
// copy of deploy/kubernetes whose kustomization also lists s.components.
func specRoot(s renderingSpec) (string, error) {
	if len(s.components) == 0 {
		return filepath.Abs(s.dir)
	}
	tmp, err := tempRoot()
	if err != nil {
		return "", err
	}
	copyDir, err := os.MkdirTemp(tmp, "tree-")
	if err != nil {
		return "", err
	}
	if err := os.CopyFS(copyDir, os.DirFS(".")); err != nil {
		return "", err
	}
	root := filepath.Join(copyDir, s.dir)
	k, err := os.ReadFile(filepath.Join(root, "kustomization.yaml"))
	if err != nil {
		return "", err
	}
	if bytes.Contains(k, []byte("\ncomponents:")) {
		return "", fmt.Errorf("%s already lists components", s.dir)
	}
	k = append(k, "\ncomponents:\n"...)
	for _, c := range s.components {
		k = append(k, "  - "+c+"\n"...)
	}
	return root, os.WriteFile(filepath.Join(root, "kustomization.yaml"), k, 0o644)
}

func loadRenderings(t *testing.T) []*rendering {
	t.Helper()
	rs, err := renderings()
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// decodeTyped decodes o into its k8s.io/api type (a local type for the
// ServiceMonitor) as strictly as the API server does: case-sensitive
// field names, no unknown and no duplicate field.
func decodeTyped(o object) (any, error) {
	var into any
	switch apiVersionOf(o) + " " + kindOf(o) {
	case "v1 Namespace":
		into = &corev1.Namespace{}
	case "v1 ServiceAccount":
		into = &corev1.ServiceAccount{}
	case "v1 Service":
		into = &corev1.Service{}
	case "apps/v1 Deployment":
		into = &appsv1.Deployment{}
	case "batch/v1 Job":
		into = &batchv1.Job{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		into = &autoscalingv2.HorizontalPodAutoscaler{}
	case "policy/v1 PodDisruptionBudget":
		into = &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1 NetworkPolicy":
		into = &networkingv1.NetworkPolicy{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		into = &serviceMonitor{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		into = &prometheusRule{}
	default:
		return nil, errors.New("a kind the test does not know: add it to decodeTyped")
	}
	js, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	strict, err := kjson.UnmarshalStrict(js, into)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(strict...); err != nil {
		return nil, err
	}
	return into, nil
}

// TestRender decodes every rendering strictly and checks what holds for
// every object.
func TestRender(t *testing.T) {
	t.Parallel()
	rs := loadRenderings(t)
	for _, r := range rs {
		t.Run(r.name, func(t *testing.T) {
			if len(r.deploys) != 2 {
				t.Errorf("%d Deployments, want dwara-api and dwara-gateway", len(r.deploys))
			}
			ns := ""
			for _, o := range r.objs {
				if slices.Contains(clusterScoped, kindOf(o)) {
					continue
				}
				switch {
				case namespaceOf(o) == "":
					t.Errorf("%s/%s has no namespace", kindOf(o), nameOf(o))
				case ns == "":
					ns = namespaceOf(o)
				case namespaceOf(o) != ns:
					t.Errorf("%s/%s is in namespace %s, the others in %s", kindOf(o), nameOf(o), namespaceOf(o), ns)
				}
				if l := metaOf(o)["labels"]; l == nil {
					t.Errorf("%s/%s has no labels", kindOf(o), nameOf(o))
				}
			}
			for _, n := range r.nss {
				if n.Name != ns {
					t.Errorf("Namespace %s, but the objects are in %s", n.Name, ns)
				}
				if n.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
					t.Errorf("Namespace %s does not enforce the restricted Pod Security Standard", n.Name)
				}
			}
		})
	}
}

// dwaraBinary builds ./cmd/dwara once.
var dwaraBinary = sync.OnceValues(func() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	tmp, err := tempRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(tmp, "dwara")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/dwara")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/dwara: %v\n%s", err, out)
	}
	return bin, nil
})

func binary(t *testing.T) string {
	t.Helper()
	bin, err := dwaraBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// contextTimeout is t's context, bounded by d.
func contextTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

// runBinary runs the binary with args and exactly env (no inherited
// environment, as in a container), within a minute.
func runBinary(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := contextTimeout(t, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// flagInfo is one flag of a dwara command, as its help lists it.
type flagInfo struct {
	name       string
	boolean    bool // listed without a value
	repeatable bool // its usage says to repeat it
}

// flagLine is the line of a flag in a command's help: Go's flag package
// ("  -name type") or dwara's own ("  --name TYPE"); the usage follows on
// lines indented further.
var flagLine = regexp.MustCompile(`^ {1,4}--?([A-Za-z0-9][-A-Za-z0-9_.]*)(?: ([^\t]*?))?\s*(?:\t(.*))?$`)

var (
	flagsMu    sync.Mutex
	flagsCache = map[string]map[string]flagInfo{}
)

// commandFlags returns the flags `dwara sub -h` lists, run with an empty
// environment. The defaults it shows are not read: the manifests set
// every value the checks need.
func commandFlags(t *testing.T, sub string) map[string]flagInfo {
	t.Helper()
	flagsMu.Lock()
	defer flagsMu.Unlock()
	if f, ok := flagsCache[sub]; ok {
		return f
	}
	stdout, stderr, err := runBinary(t, nil, sub, "-h")
	if err != nil {
		t.Fatalf("dwara %s -h: %v\n%s%s", sub, err, stdout, stderr)
	}
	help := stdout + stderr
	flags := map[string]flagInfo{}
	cur := ""
	for line := range strings.Lines(help) {
		line = strings.TrimRight(line, "\n")
		if m := flagLine.FindStringSubmatch(line); m != nil {
			cur = m[1]
			flags[cur] = flagInfo{name: cur, boolean: m[2] == "", repeatable: strings.Contains(m[3], "repeat")}
			continue
		}
		if cur != "" && (strings.HasPrefix(line, "     ") || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "    \t")) {
			if strings.Contains(line, "repeat") {
				f := flags[cur]
				f.repeatable = true
				flags[cur] = f
			}
			continue
		}
		cur = ""
	}
	if len(flags) == 0 {
		t.Fatalf("dwara %s -h lists %d flags; the test cannot read its output:\n%s", sub, len(flags), help)
	}
	flagsCache[sub] = flags
	return flags
}

// flagArg is one flag of a container's args.
type flagArg struct{ name, value string }

// parseArgs splits a dwara container's args into its command and flags,
// checking every flag against `dwara sub -h`: each is --name=value (or
// --name for a boolean), defined, and given once unless repeatable.
func parseArgs(t *testing.T, args []string) (sub string, flags []flagArg, err error) {
	t.Helper()
	if len(args) == 0 || !slices.Contains(subcommands, args[0]) {
		return "", nil, fmt.Errorf("args %q: want one of %v first", args, subcommands)
	}
	sub = args[0]
	defined := commandFlags(t, sub)
	seen := map[string]bool{}
	for _, a := range args[1:] {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") {
			return "", nil, fmt.Errorf("arg %q: write flags as --name=value", a)
		}
		f, ok := defined[name]
		switch {
		case !ok:
			return "", nil, fmt.Errorf("arg %q: dwara %s has no flag --%s", a, sub, name)
		case !hasValue && !f.boolean:
			return "", nil, fmt.Errorf("arg %q: write --%s=value in one arg", a, name)
		case seen[name] && !f.repeatable:
			return "", nil, fmt.Errorf("arg %q: --%s given twice", a, name)
		}
		if !hasValue {
			value = "true"
		}
		seen[name] = true
		flags = append(flags, flagArg{name, value})
	}
	return sub, flags, nil
}

// flagValue returns the last value of flag name in flags, "" when it is
// not given (the checks do not rely on defaults: the listen addresses and
// the shutdown timeout must be explicit).
func flagValue(flags []flagArg, name string) string {
	for i := len(flags) - 1; i >= 0; i-- {
		if flags[i].name == name {
			return flags[i].value
		}
	}
	return ""
}

func flagValues(flags []flagArg, name string) []string {
	var vs []string
	for _, f := range flags {
		if f.name == name {
			vs = append(vs, f.value)
		}
	}
	return vs
}

// listenerOf is one listener of a dwara process, as its flags configure
// it.
type listenerOf struct {
	role string // proxy, admin or metrics
	flag string
	addr string
	tls  bool
}

// listeners returns the listeners of `dwara sub` with flags: serve's proxy
// and admin listener (both TLS with --tls-cert), gateway's proxy (TLS with
// --tls-cert) and metrics listener (always plain).
func listeners(sub string, flags []flagArg) []listenerOf {
	tls := flagValue(flags, "tls-cert") != ""
	switch sub {
	case "serve":
		return []listenerOf{
			{"proxy", "listen", flagValue(flags, "listen"), tls},
			{"admin", "admin-listen", flagValue(flags, "admin-listen"), tls},
		}
	case "gateway":
		return []listenerOf{
			{"proxy", "listen", flagValue(flags, "listen"), tls},
			{"metrics", "metrics-listen", flagValue(flags, "metrics-listen"), false},
		}
	}
	return nil
}

// probePaths are the paths the kubelet may probe on each listener
// (answered whatever the Host, never authenticated), by probe.
var probePaths = map[string]map[string]string{
	"admin":   {"startup": "/healthz", "liveness": "/healthz", "readiness": "/readyz"},
	"metrics": {"startup": "/healthz", "liveness": "/healthz", "readiness": "/readyz"},
}

func splitPort(t *testing.T, addr string) (host string, port int32) {
	t.Helper()
	h, p, err := splitHostPort(addr)
	if err != nil {
		t.Errorf("listen address %q: %v", addr, err)
		return "", 0
	}
	return h, p
}

func splitHostPort(addr string) (string, int32, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0, errors.New("no port")
	}
	p, err := strconv.ParseInt(addr[i+1:], 10, 32)
	if err != nil || p <= 0 || p > 65535 {
		return "", 0, fmt.Errorf("bad port %q", addr[i+1:])
	}
	return strings.Trim(addr[:i], "[]"), int32(p), nil
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1"
}

// containerEnv resolves the environment of c in a pod of namespace ns as
// the kubelet does, with secrets' values from secrets: literal values
// ($(VAR) of earlier entries expanded), fieldRef (metadata.namespace,
// metadata.name), secretKeyRef and resourceFieldRef (rounded up, as the
// kubelet does).
func containerEnv(c *corev1.Container, ns string, secrets map[string]map[string]string) ([]string, map[string]string, error) {
	vars := map[string]string{}
	var env []string
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v, _ = expand(e.Value, vars)
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.namespace":
				v = ns
			case "metadata.name":
				v = "pod-0"
			default:
				return nil, nil, fmt.Errorf("env %s: fieldRef %s is not simulated", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := secrets[ref.Name][ref.Key]
			if !ok {
				return nil, nil, fmt.Errorf("env %s: Secret %s key %s is not one the operator creates (operatorSecrets)", e.Name, ref.Name, ref.Key)
			}
			v = s
		case e.ValueFrom.ResourceFieldRef != nil:
			var err error
			if v, err = resourceValue(c, e.ValueFrom.ResourceFieldRef); err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		default:
			return nil, nil, fmt.Errorf("env %s: a source the test does not simulate", e.Name)
		}
		if _, dup := vars[e.Name]; dup {
			return nil, nil, fmt.Errorf("env %s is set twice", e.Name)
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env, vars, nil
}

// resourceValue is the value of a resourceFieldRef env of c, as the
// kubelet computes it: the quantity divided by the divisor, rounded up.
func resourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		return "", fmt.Errorf("resourceFieldRef of container %s", ref.ContainerName)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	kind, res, _ := strings.Cut(ref.Resource, ".")
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(res)]
	if !ok {
		return "", fmt.Errorf("%s is not set on the container (the kubelet would use the node's capacity)", ref.Resource)
	}
	switch res {
	case "cpu":
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	case "memory":
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	return "", fmt.Errorf("resource %s", ref.Resource)
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand expands $(VAR) references as the kubelet does ($$ is a literal
// $; an undefined reference stays as written) and returns the names of
// the undefined ones.
func expand(s string, vars map[string]string) (string, []string) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		name := m[2 : len(m)-1]
		if v, ok := vars[name]; ok {
			return v
		}
		missing = append(missing, name)
		return m
	})
	return out, missing
}

// referencedVars are the names $(VAR) references in args name.
func referencedVars(args []string) []string {
	var names []string
	for _, a := range args {
		for _, m := range varRef.FindAllStringSubmatch(a, -1) {
			if m[1] != "" {
				names = append(names, m[1])
			}
		}
	}
	return names
}

// fakeSecrets are values for every key of operatorSecrets.
func fakeSecrets() map[string]map[string]string {
	s := map[string]map[string]string{}
	for name, sec := range operatorSecrets {
		s[name] = map[string]string{}
		for _, k := range sec.keys {
			s[name][k] = name + "-" + k + "-value"
		}
	}
	s["dwara-database"]["url"] = "postgres://dwara:secret@postgres.example:5432/dwara?sslmode=require"
	return s
}

// envVarsRead returns the environment variables the non-test Go files of
// dirs (module-relative) read: string literals given to os.Getenv or
// os.LookupEnv, or to a function of theirs that passes one of its
// parameters to them (such as envOr(k, def) or readToken(file, env)).
func envVarsRead(t *testing.T, dirs ...string) map[string]bool {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, d := range dirs {
		pkgs, err := filepath.Glob(filepath.Join(root, d, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	isGetenv := func(call *ast.CallExpr) bool {
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv")
	}
	// wrappers: function name -> index of the parameter it reads as a
	// variable name.
	wrappers := map[string]int{}
	for range 3 { // wrappers of wrappers
		for _, f := range files {
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil || fn.Recv != nil {
					continue
				}
				var params []string
				for _, field := range fn.Type.Params.List {
					for _, n := range field.Names {
						params = append(params, n.Name)
					}
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok || len(call.Args) == 0 {
						return true
					}
					arg := call.Args[0]
					if id, ok := call.Fun.(*ast.Ident); ok {
						i, isWrapper := wrappers[id.Name]
						if !isWrapper || i >= len(call.Args) {
							return true
						}
						arg = call.Args[i]
					} else if !isGetenv(call) {
						return true
					}
					if id, ok := arg.(*ast.Ident); ok {
						if i := slices.Index(params, id.Name); i >= 0 {
							wrappers[fn.Name.Name] = i
						}
					}
					return true
				})
			}
		}
	}
	read := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			arg := call.Args[0]
			if id, ok := call.Fun.(*ast.Ident); ok {
				i, isWrapper := wrappers[id.Name]
				if !isWrapper || i >= len(call.Args) {
					return true
				}
				arg = call.Args[i]
			} else if !isGetenv(call) {
				return true
			}
			if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					read[s] = true
				}
			}
			return true
		})
	}
	if !read["DWARA_DATABASE_URL"] {
		t.Fatalf("found no read of DWARA_DATABASE_URL in %v (found %v): the scan is broken", dirs, read)
	}
	return read
}

// runtimeEnvVars returns the variables the Go runtime reads
// (gogetenv("NAME") in $GOROOT/src/runtime).
func runtimeEnvVars(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "src", "runtime", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`gogetenv\("([A-Z0-9_]+)"\)`)
	vars := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			vars[string(m[1])] = true
		}
	}
	if !vars["GOMAXPROCS"] || !vars["GOMEMLIMIT"] {
		t.Fatalf("the Go runtime's sources read %v: the scan is broken", vars)
	}
	return vars
}

// TestContainers checks every container of every rendering against the
// binary: its command and flags, its environment, its ports and probes,
// its files, its resources and its security context.
func TestContainers(t *testing.T) {
	t.Parallel()
	rs := loadRenderings(t)
	binaryReads := envVarsRead(t, "cmd/dwara", "node")
	runtimeReads := runtimeEnvVars(t)
	entrypoint := dockerEntrypoint(t)
	for _, r := range rs {
		t.Run(r.name, func(t *testing.T) {
			for _, w := range r.workloads() {
				checkPod(t, w)
				for _, c := range w.containers() {
					t.Run(w.String()+"/"+c.Name, func(t *testing.T) {
						if len(c.Command) != 0 {
							t.Errorf("command %q: leave it to the image's ENTRYPOINT %q", c.Command, entrypoint)
						}
						checkImage(t, r, c)
						checkContainer(t, r, w, c, binaryReads, runtimeReads)
					})
				}
			}
		})
	}
}

// dockerEntrypoint returns the ENTRYPOINT of the Dockerfile, which must be
// the dwara binary: the containers give only args.
func dockerEntrypoint(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var entry []string
	nonroot := false
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(rest), &entry); err != nil {
				t.Fatalf("Dockerfile ENTRYPOINT %s: %v", rest, err)
			}
		}
		if strings.HasPrefix(line, "FROM ") {
			nonroot = strings.Contains(line, ":nonroot") // the final stage counts
		}
	}
	if len(entry) != 1 || filepath.Base(entry[0]) != "dwara" {
		t.Fatalf("Dockerfile ENTRYPOINT %q: the manifests give dwara's args only", entry)
	}
	if !nonroot {
		t.Errorf("the Dockerfile's final stage is not a distroless :nonroot image (uid 65532), which runAsUser assumes")
	}
	return entry[0]
}

var digestRef = regexp.MustCompile(`^[a-z0-9][a-z0-9./_-]*@sha256:[0-9a-f]{64}$`)

func checkImage(t *testing.T, r *rendering, c *corev1.Container) {
	if r.production() {
		if !digestRef.MatchString(c.Image) {
			t.Errorf("image %q is not pinned by digest", c.Image)
		}
	} else if name, tag, _ := splitImage(c.Image); name != "dwara" {
		t.Errorf("image %q: the base uses the name the Dockerfile builds, dwara", c.Image)
	} else if tag == "" || tag == "latest" {
		t.Errorf("image %q: the base names a tag (not latest, which an untagged name means)", c.Image)
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy %q, want IfNotPresent", c.ImagePullPolicy)
	}
}

// checkPod checks the pod-level settings of w.
func checkPod(t *testing.T, w workload) {
	t.Run(w.String(), func(t *testing.T) {
		p := w.pod
		sc := p.SecurityContext
		switch {
		case sc == nil:
			t.Fatal("no pod securityContext")
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Error("runAsNonRoot is not true")
		case sc.RunAsUser == nil || *sc.RunAsUser != 65532:
			t.Error("runAsUser is not 65532 (distroless nonroot)")
		case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Error("seccompProfile is not RuntimeDefault")
		case sc.FSGroup == nil || *sc.FSGroup != 65532:
			t.Error("fsGroup is not 65532 (the group that reads the mounted Secrets)")
		}
		if p.HostNetwork || p.HostPID || p.HostIPC {
			t.Error("host namespaces")
		}
		if p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken {
			t.Error("automountServiceAccountToken is not false: dwara never calls the Kubernetes API")
		}
		if p.EnableServiceLinks == nil || *p.EnableServiceLinks {
			t.Error("enableServiceLinks is not false: service links would add DWARA_* variables to the environment")
		}
		for _, v := range p.Volumes {
			if v.EmptyDir != nil && v.Name == "state" && w.name == "dwara-gateway" {
				continue // the gateways' --state-dir (checkStateDir)
			}
			if v.Secret == nil {
				t.Errorf("volume %s is not a Secret (nothing else is needed: dwara writes no file but a gateway's --state-dir)", v.Name)
				continue
			}
			sec, ok := operatorSecrets[v.Secret.SecretName]
			if !ok {
				t.Errorf("volume %s: Secret %s is not in operatorSecrets", v.Name, v.Secret.SecretName)
			}
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o440 {
				t.Errorf("volume %s: defaultMode is not 0440", v.Name)
			}
			for _, it := range v.Secret.Items {
				if !slices.Contains(sec.keys, it.Key) {
					t.Errorf("volume %s: Secret %s has no key %s", v.Name, v.Secret.SecretName, it.Key)
				}
			}
		}
		if w.kind == "Job" {
			if p.RestartPolicy != corev1.RestartPolicyNever && p.RestartPolicy != corev1.RestartPolicyOnFailure {
				t.Errorf("restartPolicy %q", p.RestartPolicy)
			}
			return
		}
		// The drain: preStop sleep, then SIGTERM and --shutdown-timeout,
		// within the grace period.
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if p.TerminationGracePeriodSeconds != nil {
			grace = *p.TerminationGracePeriodSeconds
		}
		for _, c := range p.Containers {
			var sleep int64
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
				t.Errorf("container %s has no preStop sleep: the Service would still send while the process drains", c.Name)
			} else {
				sleep = c.Lifecycle.PreStop.Sleep.Seconds
			}
			_, flags, err := parseArgs(t, c.Args)
			if err != nil {
				continue // reported by checkContainer
			}
			d, err := time.ParseDuration(flagValue(flags, "shutdown-timeout")) // "" fails: set it explicitly
			if err != nil {
				t.Errorf("container %s: --shutdown-timeout: %v", c.Name, err)
				continue
			}
			if need := sleep + int64(d.Seconds()) + 5; grace < need {
				t.Errorf("terminationGracePeriodSeconds %d < preStop sleep %d s + --shutdown-timeout %v + 5 s", grace, sleep, d)
			}
		}
	})
}

// checkContainer checks one container against the binary.
func checkContainer(t *testing.T, r *rendering, w workload, c *corev1.Container, binaryReads, runtimeReads map[string]bool) {
	sub, flags, err := parseArgs(t, c.Args)
	if err != nil {
		t.Fatal(err)
	}
	secrets := fakeSecrets()
	env, vars, err := containerEnv(c, w.namespace, secrets)
	if err != nil {
		t.Fatal(err)
	}

	// Every variable is read by the binary or the Go runtime, or named by
	// a $(VAR) of the args.
	refs := referencedVars(c.Args)
	for _, e := range c.Env {
		if !binaryReads[e.Name] && !runtimeReads[e.Name] && !slices.Contains(refs, e.Name) {
			t.Errorf("env %s: neither dwara (cmd/dwara, node) nor the Go runtime reads it, and no $(%s) in args uses it", e.Name, e.Name)
		}
		if strings.Contains(e.Name, "TOKEN") {
			t.Errorf("env %s: tokens come as files (--admin-token-file, --read-token-file)", e.Name)
		}
	}
	if vars["DWARA_DATABASE_URL"] == "" || !strings.Contains(vars["DWARA_DATABASE_URL"], "postgres://") {
		t.Errorf("no DWARA_DATABASE_URL from the Secret dwara-database: dwara %s needs the database", sub)
	}
	if slices.ContainsFunc(flags, func(f flagArg) bool { return f.name == "database-url" }) {
		t.Errorf("--database-url in args puts the password on the command line: use DWARA_DATABASE_URL")
	}

	// The expanded args parse: `dwara SUB ARGS... -h` exits 0 only when
	// every flag before -h took its value, and the process starts with
	// this environment (a malformed GOMEMLIMIT stops the Go runtime).
	var expanded []string
	for _, a := range c.Args {
		x, missing := expand(a, vars)
		if len(missing) > 0 {
			t.Errorf("arg %q: $(%s) is not in the container's env", a, strings.Join(missing, "), $("))
		}
		expanded = append(expanded, x)
	}
	if _, stderr, err := runBinary(t, env, append(expanded, "-h")...); err != nil || strings.Contains(stderr, "invalid value") {
		t.Errorf("dwara %q -h with the container's env: %v\n%s", expanded, err, stderr)
	}
	_, expFlags, err := parseArgs(t, expanded)
	if err != nil {
		t.Fatal(err)
	}

	checkResources(t, c, vars)
	checkEphemeralStorage(t, w, c)
	checkSecurity(t, c)
	checkFiles(t, w, c, sub, expFlags)
	checkPortsAndProbes(t, c, sub, expFlags)

	switch sub {
	case "gateway":
		checkStateDir(t, w, c, expFlags)
	case "serve":
		if tokens := flagValue(expFlags, "admin-token-file"); tokens == "" {
			h, _ := splitPort(t, flagValue(expFlags, "admin-listen"))
			if !isLoopbackHost(h) {
				t.Errorf("the admin listener is not loopback and there is no --admin-token-file: serve refuses to start")
			}
		}
		checkAdminHosts(t, r, w, expFlags)
	case "migrate":
		if w.kind == "Deployment" && !slices.ContainsFunc(w.pod.InitContainers, func(ic corev1.Container) bool { return ic.Name == c.Name }) {
			t.Errorf("migrate runs as a container of a Deployment")
		}
	}
	if f := flagValue(expFlags, "log-format"); f != "" {
		t.Errorf("--log-format=%s: set the format once, in DWARA_LOG_FORMAT (--log-format defaults to it, and the lines logged before the flags are parsed follow only it)", f)
	}
	if sub != "migrate" {
		if gotTLS := flagValue(expFlags, "tls-cert") != ""; gotTLS != r.production() {
			t.Errorf("TLS: %v, want %v", gotTLS, r.production())
		}
	}
	// (The optional migration Job logs text unless an overlay patches it.)
	if r.production() && w.kind == "Deployment" && vars["DWARA_LOG_FORMAT"] != "json" {
		t.Errorf("DWARA_LOG_FORMAT is not json: the lines logged before the flags are parsed would be text")
	}
	if sub == "migrate" && w.kind == "Job" && r.production() {
		if !slices.ContainsFunc(r.jobs, func(j *batchv1.Job) bool { return j.Annotations["argocd.argoproj.io/hook"] == "PreSync" }) {
			t.Errorf("the migration Job is not an Argo CD PreSync hook")
		}
	}
}

// checkResources checks requests and limits, and that GOMAXPROCS and
// GOMEMLIMIT follow them.
func checkResources(t *testing.T, c *corev1.Container, vars map[string]string) {
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := c.Resources.Requests[res]
		lim, okLim := c.Resources.Limits[res]
		if !okReq || !okLim {
			t.Errorf("%s: requests and limits are not both set", res)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("%s: request %s over limit %s", res, req.String(), lim.String())
		}
	}
	lim := c.Resources.Limits[corev1.ResourceCPU]
	if lim.MilliValue()%1000 != 0 {
		t.Errorf("limits.cpu %s is not whole CPUs: GOMAXPROCS, rounded up, would oversubscribe the quota", lim.String())
	}
	env := map[string]*corev1.EnvVarSource{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom
	}
	want := map[string]string{"GOMAXPROCS": "limits.cpu", "GOMEMLIMIT": "requests.memory"}
	for name, res := range want {
		src := env[name]
		if src == nil || src.ResourceFieldRef == nil || src.ResourceFieldRef.Resource != res {
			t.Errorf("env %s does not come from resourceFieldRef %s", name, res)
			continue
		}
		if d := src.ResourceFieldRef.Divisor; !d.IsZero() && d.Cmp(resource.MustParse("1")) != 0 {
			t.Errorf("env %s: divisor %s: GOMAXPROCS wants whole CPUs and GOMEMLIMIT bytes (a divisor of 1Mi gives a count Go reads as bytes)", name, d.String())
		}
	}
	procs, err := strconv.Atoi(vars["GOMAXPROCS"])
	if err != nil || procs < 1 || int64(procs) != lim.Value() {
		t.Errorf("GOMAXPROCS=%q, want limits.cpu %s", vars["GOMAXPROCS"], lim.String())
	}
	memLimit := c.Resources.Limits[corev1.ResourceMemory]
	gomem, err := strconv.ParseInt(vars["GOMEMLIMIT"], 10, 64)
	if err != nil {
		t.Errorf("GOMEMLIMIT=%q is not a byte count", vars["GOMEMLIMIT"])
	} else if ratio := float64(gomem) / float64(memLimit.Value()); ratio < 0.8 || ratio > 0.95 {
		t.Errorf("GOMEMLIMIT %d is %.0f%% of limits.memory %s: set requests.memory to 80-95%% of the limit, so the GC has room before the OOM killer", gomem, 100*ratio, memLimit.String())
	}
}

// logRoom is the ephemeral storage a container's logs take at most with
// the kubelet's default rotation (containerLogMaxFiles 5 of
// containerLogMaxSize 10Mi).
var logRoom = resource.MustParse("50Mi")

// checkEphemeralStorage: c requests ephemeral storage (so the scheduler
// counts it) within a limit (so a runaway log or volume evicts the pod,
// not the node's other pods), and the limit holds the logs and the
// emptyDirs c mounts.
func checkEphemeralStorage(t *testing.T, w workload, c *corev1.Container) {
	req, okReq := c.Resources.Requests[corev1.ResourceEphemeralStorage]
	lim, okLim := c.Resources.Limits[corev1.ResourceEphemeralStorage]
	if !okReq || !okLim {
		t.Errorf("ephemeral-storage: requests and limits are not both set")
		return
	}
	if req.Cmp(lim) > 0 {
		t.Errorf("ephemeral-storage: request %s over limit %s", req.String(), lim.String())
	}
	need := logRoom.DeepCopy()
	for _, m := range c.VolumeMounts {
		for _, v := range w.pod.Volumes {
			if v.Name != m.Name || v.EmptyDir == nil {
				continue
			}
			if v.EmptyDir.SizeLimit == nil {
				t.Errorf("emptyDir %s has no sizeLimit", v.Name)
				continue
			}
			need.Add(*v.EmptyDir.SizeLimit)
		}
	}
	if lim.Cmp(need) < 0 {
		t.Errorf("ephemeral-storage: limit %s under the %s its logs and emptyDirs may take", lim.String(), need.String())
	}
}

func checkSecurity(t *testing.T, c *corev1.Container) {
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Error("no securityContext")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem is not true")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Error("capabilities: drop ALL, add none")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("privileged")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot is not true")
	}
}

// checkFiles checks that every file a flag names is a key of a Secret
// mounted read-only, and that the TLS pair comes from a kubernetes.io/tls
// Secret.
func checkFiles(t *testing.T, w workload, c *corev1.Container, sub string, flags []flagArg) {
	fileFlags := map[string]string{"admin-token-file": "admin-token", "read-token-file": "read-token", "tls-cert": "tls.crt", "tls-key": "tls.key"}
	tlsSecret := ""
	for _, f := range flags {
		wantKey, ok := fileFlags[f.name]
		if !ok || f.value == "" {
			continue
		}
		secret, key, err := mountedSecretKey(w, c, f.value)
		if err != nil {
			t.Errorf("--%s=%s: %v", f.name, f.value, err)
			continue
		}
		if key != wantKey {
			t.Errorf("--%s=%s is key %s of Secret %s, want %s", f.name, f.value, key, secret, wantKey)
		}
		if strings.HasPrefix(f.name, "tls-") {
			if !operatorSecrets[secret].tls {
				t.Errorf("--%s from Secret %s, which is not of type kubernetes.io/tls", f.name, secret)
			}
			if tlsSecret != "" && tlsSecret != secret {
				t.Errorf("--tls-cert and --tls-key from two Secrets")
			}
			tlsSecret = secret
		}
	}
	if sub == "serve" && flagValue(flags, "admin-token-file") == "" {
		t.Errorf("no --admin-token-file")
	}
}

// mountedSecretKey returns the Secret and key that path is in c, through
// a read-only, whole-directory (no subPath) mount of a Secret volume.
func mountedSecretKey(w workload, c *corev1.Container, path string) (secret, key string, err error) {
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if !m.ReadOnly {
			return "", "", fmt.Errorf("mount %s is not read-only", m.MountPath)
		}
		if m.SubPath != "" {
			return "", "", fmt.Errorf("mount %s uses subPath: the file would never be updated", m.MountPath)
		}
		for _, v := range w.pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.Secret == nil {
				return "", "", fmt.Errorf("volume %s is not a Secret", v.Name)
			}
			if len(v.Secret.Items) == 0 {
				return v.Secret.SecretName, rel, nil
			}
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					return v.Secret.SecretName, it.Key, nil
				}
			}
			return "", "", fmt.Errorf("Secret volume %s projects no %s", v.Name, rel)
		}
		return "", "", fmt.Errorf("mount %s has no volume", m.MountPath)
	}
	return "", "", errors.New("no volume is mounted there")
}

// checkPortsAndProbes checks that the container's ports are the
// listeners its flags configure, and that every probe targets a listener
// that answers it.
func checkPortsAndProbes(t *testing.T, c *corev1.Container, sub string, flags []flagArg) {
	ls := listeners(sub, flags)
	byPort := map[int32]listenerOf{}
	for _, l := range ls {
		if l.addr == "" {
			t.Errorf("no --%s: set it explicitly (the defaults are loopback)", l.flag)
			continue
		}
		host, port := splitPort(t, l.addr)
		exposed := slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == port })
		switch {
		case isLoopbackHost(host) && exposed:
			t.Errorf("--%s=%s is loopback, but a containerPort names %d", l.flag, l.addr, port)
		case !isLoopbackHost(host) && !exposed:
			t.Errorf("--%s=%s has no containerPort", l.flag, l.addr)
		case !isLoopbackHost(host) && host != "":
			t.Errorf("--%s=%s: listen on :%d (every address of the pod, IPv4 and IPv6)", l.flag, l.addr, port)
		}
		byPort[port] = l
	}
	for _, p := range c.Ports {
		if _, ok := byPort[p.ContainerPort]; !ok {
			t.Errorf("containerPort %s/%d: no listener of dwara %s listens there", p.Name, p.ContainerPort, sub)
		}
		if p.Name == "" {
			t.Errorf("containerPort %d has no name", p.ContainerPort)
		}
	}
	probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	if sub == "migrate" {
		for kind, p := range probes {
			if p != nil {
				t.Errorf("%s probe on migrate", kind)
			}
		}
		return
	}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s httpGet probe", kind)
			continue
		}
		port, ok := containerPort(c, p.HTTPGet.Port)
		if !ok {
			t.Errorf("%s probe: port %s is no containerPort", kind, p.HTTPGet.Port.String())
			continue
		}
		l, ok := byPort[port]
		if !ok {
			t.Errorf("%s probe: port %d is no listener", kind, port)
			continue
		}
		if want := probePaths[l.role][kind]; p.HTTPGet.Path != want {
			t.Errorf("%s probe: %s on the %s listener (--%s), want %q", kind, p.HTTPGet.Path, l.role, l.flag, want)
		}
		scheme := corev1.URISchemeHTTP
		if l.tls {
			scheme = corev1.URISchemeHTTPS
		}
		if got := p.HTTPGet.Scheme; got != scheme && !(got == "" && scheme == corev1.URISchemeHTTP) {
			t.Errorf("%s probe: scheme %q, the %s listener serves %s", kind, got, l.role, scheme)
		}
		if p.HTTPGet.Host != "" || len(p.HTTPGet.HTTPHeaders) > 0 {
			t.Errorf("%s probe: sets a host or headers", kind)
		}
	}
}

// containerPort resolves a probe's or Service's port (a name or a number)
// to a containerPort of c.
func containerPort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// checkAdminHosts checks that serve answers to the names its Services
// give it: NAME, NAME.NS, NAME.NS.svc and NAME.NS.svc.cluster.local.
func checkAdminHosts(t *testing.T, r *rendering, w workload, flags []flagArg) {
	hosts := flagValues(flags, "admin-host")
	for _, s := range r.services {
		if !selects(s.Spec.Selector, w.labels) {
			continue
		}
		for _, name := range []string{s.Name, s.Name + "." + s.Namespace, s.Name + "." + s.Namespace + ".svc", s.Name + "." + s.Namespace + ".svc.cluster.local"} {
			if !slices.Contains(hosts, name) {
				t.Errorf("--admin-host %s is missing: a client of Service %s using it would get 421 (have %v)", name, s.Name, hosts)
			}
		}
	}
}

func selects(selector, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

// podsOf returns the workloads whose pods sel selects in namespace ns.
func (r *rendering) podsOf(ns string, sel labels.Selector) []workload {
	var ws []workload
	for _, w := range r.workloads() {
		if w.namespace == ns && sel.Matches(labels.Set(w.labels)) {
			ws = append(ws, w)
		}
	}
	return ws
}

// roleOfPort returns the listener behind containerPort port of w (role ""
// when none).
func roleOfPort(t *testing.T, w workload, port int32) listenerOf {
	for _, c := range w.pod.Containers {
		sub, flags, err := parseArgs(t, c.Args)
		if err != nil {
			continue
		}
		for _, l := range listeners(sub, flags) {
			if _, p, err := splitHostPort(l.addr); err == nil && p == port {
				return l
			}
		}
	}
	return listenerOf{}
}

// TestObjects checks the objects that point at pods: Services,
// the HorizontalPodAutoscaler, PodDisruptionBudgets, NetworkPolicies and
// ServiceMonitors.
func TestObjects(t *testing.T) {
	t.Parallel()
	for _, r := range loadRenderings(t) {
		t.Run(r.name, func(t *testing.T) {
			for _, d := range r.deploys {
				sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
				if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("Deployment %s: its selector does not match its pods", d.Name)
				}
				if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
					t.Errorf("Deployment %s: a rollout may take serving pods away (maxUnavailable is not 0)", d.Name)
				}
			}
			checkServices(t, r)
			checkHPA(t, r)
			checkPDBs(t, r)
			checkNetworkPolicies(t, r)
			checkEgress(t, r)
			checkServiceMonitors(t, r)
			checkPrometheusRules(t, r)
		})
	}
}

func checkServices(t *testing.T, r *rendering) {
	for _, s := range r.services {
		ws := r.podsOf(s.Namespace, labels.SelectorFromSet(s.Spec.Selector))
		if len(s.Spec.Selector) == 0 || len(ws) != 1 || ws[0].kind != "Deployment" {
			t.Errorf("Service %s selects %v, want the pods of one Deployment", s.Name, ws)
			continue
		}
		w := ws[0]
		for _, p := range s.Spec.Ports {
			if p.TargetPort.Type != intstr.String {
				t.Errorf("Service %s port %s: targetPort %s is not a containerPort name", s.Name, p.Name, p.TargetPort.String())
			}
			found := false
			for _, c := range w.pod.Containers {
				port, ok := containerPort(&c, p.TargetPort)
				if !ok {
					continue
				}
				found = true
				l := roleOfPort(t, w, port)
				if l.role != "proxy" && s.Spec.Type != corev1.ServiceTypeClusterIP && s.Spec.Type != "" {
					t.Errorf("Service %s (%s) exposes the %s listener", s.Name, s.Spec.Type, l.role)
				}
			}
			if !found {
				t.Errorf("Service %s port %s: targetPort %s is no containerPort of %s", s.Name, p.Name, p.TargetPort.String(), w)
			}
		}
	}
	if r.production() {
		i := slices.IndexFunc(r.services, func(s *corev1.Service) bool { return s.Name == "dwara-gateway" })
		if i < 0 || r.services[i].Spec.Type != corev1.ServiceTypeLoadBalancer {
			t.Errorf("production: the gateways' Service is not a LoadBalancer")
		}
	}
}

func checkHPA(t *testing.T, r *rendering) {
	if len(r.hpas) != 1 {
		t.Fatalf("%d HorizontalPodAutoscalers, want one for the gateways", len(r.hpas))
	}
	h := r.hpas[0]
	ref := h.Spec.ScaleTargetRef
	i := slices.IndexFunc(r.deploys, func(d *appsv1.Deployment) bool { return d.Name == ref.Name })
	if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || i < 0 || r.deploys[i].Namespace != h.Namespace {
		t.Fatalf("HPA %s targets %s %s %s, which is not a Deployment here", h.Name, ref.APIVersion, ref.Kind, ref.Name)
	}
	d := r.deploys[i]
	if sub, _, _ := parseArgs(t, d.Spec.Template.Spec.Containers[0].Args); sub != "gateway" {
		t.Errorf("HPA %s targets %s, which runs %s, not the gateways", h.Name, d.Name, sub)
	}
	if d.Spec.Replicas != nil {
		t.Errorf("Deployment %s sets replicas, which every apply would reset under the HPA", d.Name)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
			t.Errorf("container %s has no requests.cpu: CPU utilization is relative to it", c.Name)
		}
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
		t.Errorf("HPA %s: minReplicas %v, maxReplicas %d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
	}
	cpu := slices.ContainsFunc(h.Spec.Metrics, func(m autoscalingv2.MetricSpec) bool {
		return m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
			m.Resource.Target.Type == autoscalingv2.UtilizationMetricType && m.Resource.Target.AverageUtilization != nil
	})
	if !cpu {
		t.Errorf("HPA %s does not scale on CPU utilization", h.Name)
	}
}

// replicasOf is the number of pods of Deployment d: its replicas, or the
// minReplicas of the HPA that owns it.
func (r *rendering) replicasOf(d workload) int32 {
	for _, h := range r.hpas {
		if h.Spec.ScaleTargetRef.Name == d.name && h.Spec.MinReplicas != nil {
			return *h.Spec.MinReplicas
		}
	}
	if d.replicas != nil {
		return *d.replicas
	}
	return 1
}

func checkPDBs(t *testing.T, r *rendering) {
	covered := map[string]int{}
	for _, p := range r.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("PDB %s: selector %v", p.Name, p.Spec.Selector)
			continue
		}
		ws := r.podsOf(p.Namespace, sel)
		if len(ws) != 1 || ws[0].kind != "Deployment" {
			t.Errorf("PDB %s selects %v, want the pods of one Deployment", p.Name, ws)
			continue
		}
		w := ws[0]
		covered[w.name]++
		n := r.replicasOf(w)
		switch {
		case p.Spec.MaxUnavailable != nil:
			if v, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, int(n), true); err != nil || v < 1 || v >= int(n) {
				t.Errorf("PDB %s: maxUnavailable %s of %d pods", p.Name, p.Spec.MaxUnavailable.String(), n)
			}
		case p.Spec.MinAvailable != nil:
			if v, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MinAvailable, int(n), true); err != nil || v < 1 || v >= int(n) {
				t.Errorf("PDB %s: minAvailable %s of %d pods", p.Name, p.Spec.MinAvailable.String(), n)
			}
		default:
			t.Errorf("PDB %s sets neither maxUnavailable nor minAvailable", p.Name)
		}
		if p.Spec.UnhealthyPodEvictionPolicy == nil || *p.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
			t.Errorf("PDB %s: a pod that is not Ready (no generation yet) would block node drains", p.Name)
		}
	}
	for _, d := range r.deploys {
		if covered[d.Name] != 1 {
			t.Errorf("Deployment %s is covered by %d PodDisruptionBudgets, want 1", d.Name, covered[d.Name])
		}
	}
}

// checkNetworkPolicies checks that the admin and metrics listeners admit
// only admin clients of the namespace and the monitoring namespace, and
// that the proxy admits everyone.
func checkNetworkPolicies(t *testing.T, r *rendering) {
	adminClient := labels.Set{adminClientLabel: "true"}
	monitoring := labels.Set{monitoringNSLabel: monitoringNS}
	for _, w := range r.workloads() {
		if w.kind != "Deployment" {
			continue
		}
		var pols []*networkingv1.NetworkPolicy
		for _, np := range r.netpols {
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
			}
			if np.Namespace == w.namespace && sel.Matches(labels.Set(w.labels)) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				pols = append(pols, np)
			}
		}
		for _, c := range w.pod.Containers {
			for _, cp := range c.Ports {
				l := roleOfPort(t, w, cp.ContainerPort)
				admitted, open := false, false
				for _, np := range pols {
					for _, rule := range np.Spec.Ingress {
						if !admitsPort(rule.Ports, cp) {
							continue
						}
						admitted = true
						if len(rule.From) == 0 {
							open = true
							continue
						}
						for _, peer := range rule.From {
							if err := privatePeer(peer, adminClient, monitoring, w.namespace); err != nil && l.role != "proxy" {
								t.Errorf("NetworkPolicy %s admits %s to %s's %s port %s: %v", np.Name, peerString(peer), w, l.role, cp.Name, err)
							}
						}
					}
				}
				switch {
				case l.role == "proxy" && !(open || len(pols) == 0):
					t.Errorf("%s: the proxy port %s is not open to all", w, cp.Name)
				case l.role != "proxy" && len(pols) == 0:
					t.Errorf("%s: no NetworkPolicy selects the pods, so the %s port %s is open", w, l.role, cp.Name)
				case l.role != "proxy" && open:
					t.Errorf("%s: the %s port %s is open to all", w, l.role, cp.Name)
				case l.role != "proxy" && !admitted:
					t.Errorf("%s: nothing may reach the %s port %s, not even Prometheus", w, l.role, cp.Name)
				}
			}
		}
	}
}

// metadataEndpoints are the cloud providers' instance metadata addresses,
// which serve the node's credentials to whoever asks from it.
var metadataEndpoints = []string{"169.254.169.254", "fd00:ec2::254"}

// checkEgress: every pod is under a NetworkPolicy that restricts its
// egress, none of which lets it reach a metadata endpoint (a published
// spec could aim a split or a health check at it and read the node's
// credentials through the proxy); the migration Job's pod admits no
// connection and reaches only DNS (53) and PostgreSQL (5432).
func checkEgress(t *testing.T, r *rendering) {
	for _, w := range r.workloads() {
		var egress, ingress []*networkingv1.NetworkPolicy
		for _, np := range r.netpols {
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
			}
			if np.Namespace != w.namespace || !sel.Matches(labels.Set(w.labels)) {
				continue
			}
			if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
				egress = append(egress, np)
			}
			if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				ingress = append(ingress, np)
			}
		}
		if len(egress) == 0 {
			t.Errorf("%s: no NetworkPolicy restricts its egress", w)
		}
		for _, np := range egress {
			for i, rule := range np.Spec.Egress {
				where := fmt.Sprintf("NetworkPolicy %s egress[%d] (%s)", np.Name, i, w)
				dnsOnly := len(rule.Ports) > 0 && !slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
					return p.Port == nil || p.Port.IntVal != 53
				})
				if len(rule.To) == 0 && !dnsOnly {
					t.Errorf("%s: to every address, the metadata endpoints %v included", where, metadataEndpoints)
				}
				for _, peer := range rule.To {
					if peer.IPBlock == nil {
						continue
					}
					for _, addr := range metadataEndpoints {
						if reachable(t, peer.IPBlock, addr) {
							t.Errorf("%s: ipBlock %s lets the pods reach the metadata endpoint %s", where, peer.IPBlock.CIDR, addr)
						}
					}
				}
				if w.kind == "Job" {
					for _, p := range rule.Ports {
						if p.Port == nil || (p.Port.IntVal != 53 && p.Port.IntVal != 5432) {
							t.Errorf("%s: port %v; the migration needs only DNS (53) and PostgreSQL (5432)", where, p.Port)
						}
					}
					if len(rule.Ports) == 0 {
						t.Errorf("%s: every port; the migration needs only DNS (53) and PostgreSQL (5432)", where)
					}
				}
			}
		}
		if w.kind == "Job" {
			if len(ingress) == 0 {
				t.Errorf("%s: no NetworkPolicy restricts its ingress", w)
			}
			for _, np := range ingress {
				if len(np.Spec.Ingress) > 0 {
					t.Errorf("NetworkPolicy %s admits connections to %s, which listens on nothing", np.Name, w)
				}
			}
		}
	}
}

// reachable reports whether ipBlock b lets addr through.
func reachable(t *testing.T, b *networkingv1.IPBlock, addr string) bool {
	ip := net.ParseIP(addr)
	_, cidr, err := net.ParseCIDR(b.CIDR)
	if err != nil {
		t.Errorf("ipBlock cidr %q: %v", b.CIDR, err)
		return false
	}
	if !cidr.Contains(ip) {
		return false
	}
	for _, e := range b.Except {
		_, ex, err := net.ParseCIDR(e)
		if err != nil {
			t.Errorf("ipBlock except %q: %v", e, err)
			continue
		}
		if ex.Contains(ip) {
			return false
		}
	}
	return true
}

// admitsPort reports whether a rule's ports admit containerPort cp.
func admitsPort(ports []networkingv1.NetworkPolicyPort, cp corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String && p.Port.StrVal == cp.Name:
			return true
		case p.Port.Type == intstr.Int && (p.Port.IntVal == cp.ContainerPort || p.EndPort != nil && p.Port.IntVal <= cp.ContainerPort && cp.ContainerPort <= *p.EndPort):
			return true
		}
	}
	return false
}

// privatePeer returns an error unless peer is pods labelled as admin
// clients in the pods' own namespace, or the monitoring namespace.
func privatePeer(peer networkingv1.NetworkPolicyPeer, adminClient, monitoring labels.Set, ns string) error {
	if peer.IPBlock != nil {
		return errors.New("an ipBlock")
	}
	if peer.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
		if err != nil {
			return err
		}
		if !sel.Matches(monitoring) || sel.Matches(labels.Set{monitoringNSLabel: ns}) || sel.Matches(labels.Set{}) {
			return errors.New("a namespaceSelector other than the monitoring namespace")
		}
		return nil
	}
	if peer.PodSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
		if err != nil {
			return err
		}
		if !sel.Matches(adminClient) || sel.Matches(labels.Set{}) {
			return fmt.Errorf("a podSelector that does not require %s=true", adminClientLabel)
		}
		return nil
	}
	return errors.New("an empty peer")
}

func peerString(p networkingv1.NetworkPolicyPeer) string {
	b, _ := json.Marshal(p)
	return string(b)
}

func checkServiceMonitors(t *testing.T, r *rendering) {
	if r.name == "production-monitoring" && len(r.monitors) != 2 {
		t.Errorf("%d ServiceMonitors, want the API's and the gateways'", len(r.monitors))
	}
	if r.name != "production-monitoring" && len(r.monitors) != 0 {
		t.Errorf("ServiceMonitors outside the optional component: their CRD may be absent")
	}
	for _, m := range r.monitors {
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("ServiceMonitor %s: selector %v", m.Name, m.Spec.Selector)
			continue
		}
		var svcs []*corev1.Service
		for _, s := range r.services {
			if s.Namespace == m.Namespace && sel.Matches(labels.Set(s.Labels)) {
				svcs = append(svcs, s)
			}
		}
		if len(svcs) != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want 1", m.Name, len(svcs))
			continue
		}
		s := svcs[0]
		for _, ep := range m.Spec.Endpoints {
			i := slices.IndexFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
			if i < 0 {
				t.Errorf("ServiceMonitor %s: Service %s has no port %s", m.Name, s.Name, ep.Port)
				continue
			}
			ws := r.podsOf(s.Namespace, labels.SelectorFromSet(s.Spec.Selector))
			if len(ws) != 1 {
				continue // reported by checkServices
			}
			var l listenerOf
			for _, c := range ws[0].pod.Containers {
				if port, ok := containerPort(&c, s.Spec.Ports[i].TargetPort); ok {
					l = roleOfPort(t, ws[0], port)
				}
			}
			if (l.role != "admin" && l.role != "metrics") || ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor %s scrapes %s on the %q listener", m.Name, ep.Path, l.role)
			}
			want := "http"
			if l.tls {
				want = "https"
			}
			if ep.Scheme != want {
				t.Errorf("ServiceMonitor %s: scheme %s, the %s listener serves %s", m.Name, ep.Scheme, l.role, want)
			}
			if want == "https" {
				checkScrapeTLS(t, m.Name, s, ep.TLSConfig)
			}
		}
	}
}

// checkScrapeTLS: Prometheus verifies an https target, with a CA from a
// Secret the operator creates, for a name of the Service it scrapes
// through (the certificate does not name the pod IP).
func checkScrapeTLS(t *testing.T, monitor string, svc *corev1.Service, tc *scrapeTLS) {
	switch {
	case tc == nil:
		t.Errorf("ServiceMonitor %s: https without tlsConfig", monitor)
		return
	case tc.InsecureSkipVerify:
		t.Errorf("ServiceMonitor %s: insecureSkipVerify; verify with tlsConfig.ca and serverName", monitor)
	case tc.CA == nil || tc.CA.Secret == nil:
		t.Errorf("ServiceMonitor %s: no tlsConfig.ca.secret to verify the certificate with", monitor)
	case !slices.Contains(operatorSecrets[tc.CA.Secret.Name].keys, tc.CA.Secret.Key):
		t.Errorf("ServiceMonitor %s: CA Secret %s key %s is not in operatorSecrets", monitor, tc.CA.Secret.Name, tc.CA.Secret.Key)
	}
	if want := svc.Name + "." + svc.Namespace + ".svc"; tc.ServerName != want {
		t.Errorf("ServiceMonitor %s: serverName %q, want %q (the name the API's certificate has)", monitor, tc.ServerName, want)
	}
}

// checkPrometheusRules: the monitoring overlay, and only it (the CRD may
// be absent elsewhere), has the PrometheusRule of deploy/prometheus, with
// alerts that each carry a severity.
func checkPrometheusRules(t *testing.T, r *rendering) {
	if want := map[bool]int{true: 1, false: 0}[r.name == "production-monitoring"]; len(r.rules) != want {
		t.Errorf("%d PrometheusRules, want %d (only production-monitoring has one: its CRD may be absent)", len(r.rules), want)
	}
	for _, pr := range r.rules {
		alerts := 0
		for _, g := range pr.Spec.Groups {
			for _, rule := range g.Rules {
				if rule.Alert == "" {
					continue
				}
				alerts++
				if rule.Labels["severity"] == "" {
					t.Errorf("PrometheusRule %s: alert %s has no severity", pr.Name, rule.Alert)
				}
			}
		}
		if alerts == 0 {
			t.Errorf("PrometheusRule %s has no alert", pr.Name)
		}
	}
}

// TestOverlayRaisesTheBase checks what the production overlay is for: more
// gateways, more resources.
func TestOverlayRaisesTheBase(t *testing.T) {
	t.Parallel()
	rs := loadRenderings(t)
	base, prod := rs[0], rs[1]
	if base.name != "base" || prod.name != "production" {
		t.Fatal("renderingSpecs starts with base and production")
	}
	if len(base.hpas) != 1 || len(prod.hpas) != 1 {
		t.Fatal("one HPA each")
	}
	if *prod.hpas[0].Spec.MinReplicas <= *base.hpas[0].Spec.MinReplicas || prod.hpas[0].Spec.MaxReplicas <= base.hpas[0].Spec.MaxReplicas {
		t.Errorf("production runs no more gateways than the base")
	}
	for _, d := range base.deploys {
		i := slices.IndexFunc(prod.deploys, func(p *appsv1.Deployment) bool { return p.Name == d.Name })
		if i < 0 {
			t.Fatalf("no Deployment %s in production", d.Name)
		}
		pd := prod.deploys[i]
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			b, p := d.Spec.Template.Spec.Containers[0].Resources.Limits[res], pd.Spec.Template.Spec.Containers[0].Resources.Limits[res]
			if p.Cmp(b) <= 0 {
				t.Errorf("%s: production limits.%s %s is not above the base's %s", d.Name, res, p.String(), b.String())
			}
		}
	}
}

// TestSecretsDocumented checks that every Secret the manifests use is one
// the README tells the operator to create, with its keys, and that
// nothing else is expected.
func TestSecretsDocumented(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, r := range loadRenderings(t) {
		for _, w := range r.workloads() {
			for _, v := range w.pod.Volumes {
				if v.Secret != nil {
					used[v.Secret.SecretName] = true
				}
			}
			for _, c := range w.containers() {
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						used[e.ValueFrom.SecretKeyRef.Name] = true
						if !slices.Contains(operatorSecrets[e.ValueFrom.SecretKeyRef.Name].keys, e.ValueFrom.SecretKeyRef.Key) {
							t.Errorf("Secret %s key %s is not in operatorSecrets", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
						}
					}
				}
			}
		}
	}
	for _, r := range loadRenderings(t) {
		for _, m := range r.monitors {
			for _, ep := range m.Spec.Endpoints {
				if tc := ep.TLSConfig; tc != nil && tc.CA != nil && tc.CA.Secret != nil {
					used[tc.CA.Secret.Name] = true
				}
			}
		}
	}
	for name, sec := range operatorSecrets {
		if !used[name] {
			t.Errorf("operatorSecrets lists %s, which nothing uses", name)
		}
		kind := "secret generic " + name
		if sec.tls {
			kind = "secret tls " + name
		}
		if !bytes.Contains(readme, []byte(kind)) {
			t.Errorf("README.md does not say `kubectl create %s`", kind)
		}
		if !sec.tls {
			for _, k := range sec.keys {
				if !bytes.Contains(readme, []byte(k+"=")) {
					t.Errorf("README.md does not create key %s of %s", k, name)
				}
			}
		}
	}
	for name := range used {
		if _, ok := operatorSecrets[name]; !ok {
			t.Errorf("Secret %s is used but not in operatorSecrets", name)
		}
	}
	if !bytes.Contains(readme, []byte("kubectl apply -k deploy/kubernetes/overlays/production")) {
		t.Errorf("README.md does not say how to apply the production overlay")
	}
}

// TestGOMEMLIMITSyntax shows that the check of GOMEMLIMIT's value in
// TestContainers can fail: the runtime stops on a quantity in
// Kubernetes' notation.
func TestGOMEMLIMITSyntax(t *testing.T) {
	t.Parallel()
	if _, _, err := runBinary(t, []string{"GOMEMLIMIT=241172480"}, "migrate", "-h"); err != nil {
		t.Errorf("GOMEMLIMIT in bytes: %v", err)
	}
	_, stderr, err := runBinary(t, []string{"GOMEMLIMIT=230Mi"}, "migrate", "-h")
	if err == nil || !strings.Contains(stderr, "malformed GOMEMLIMIT") {
		t.Errorf("GOMEMLIMIT=230Mi: %v, %q; want the runtime to refuse it", err, stderr)
	}
}

// TestKubectlKustomize renders every kustomization with `kubectl
// kustomize` too, when kubectl is on PATH, and compares the objects.
func TestKubectlKustomize(t *testing.T) {
	t.Parallel()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH: the manifests were rendered by the test's own renderer only")
	}
	for _, r := range loadRenderings(t) {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := contextTimeout(t, 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, kubectl, "kustomize", r.root)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v\n%s", r.root, err, stderr.Bytes())
			}
			theirs, err := parseObjects(out)
			if err != nil {
				t.Fatal(err)
			}
			if len(theirs) != len(r.objs) {
				t.Errorf("kubectl kustomize gives %d objects, the test's renderer %d", len(theirs), len(r.objs))
			}
			for _, o := range r.objs {
				i := slices.IndexFunc(theirs, func(x object) bool { return sameID(x, o) })
				if i < 0 {
					t.Errorf("%s/%s: not in kubectl's output", kindOf(o), nameOf(o))
					continue
				}
				if !reflect.DeepEqual(normalize(o), normalize(theirs[i])) {
					a, _ := json.MarshalIndent(o, "", "  ")
					b, _ := json.MarshalIndent(theirs[i], "", "  ")
					t.Errorf("%s/%s differs:\nthe test's renderer:\n%s\nkubectl kustomize:\n%s", kindOf(o), nameOf(o), a, b)
				}
			}
		})
	}
}

// normalize makes numbers comparable across the two decoders.
func normalize(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// checkStateDir checks that a gateway keeps its last generation in a
// directory of an emptyDir mounted writable (the root file system is
// read-only), so that a container restarted while PostgreSQL is away
// starts from it.
func checkStateDir(t *testing.T, w workload, c *corev1.Container, flags []flagArg) {
	dir := flagValue(flags, "state-dir")
	if dir == "" || dir == "none" {
		t.Errorf("no --state-dir: a gateway restarted while PostgreSQL is away would serve nothing")
		return
	}
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(dir, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		if m.ReadOnly {
			t.Errorf("--state-dir=%s is on the read-only mount %s", dir, m.MountPath)
		}
		for _, v := range w.pod.Volumes {
			if v.Name == m.Name && v.EmptyDir == nil {
				t.Errorf("--state-dir=%s is on volume %s, which is not an emptyDir", dir, v.Name)
			}
		}
		return
	}
	t.Errorf("--state-dir=%s is on no mount: the root file system is read-only", dir)
}
