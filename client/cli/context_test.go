package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/api/apitest"
	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testcert"
)

// tlsContext is an API served over TLS with a token, and a client
// configuration file whose current context reaches it: the API's URL, a
// token file and the CA, relative to the file.
type tlsContext struct {
	url, dir, file string
	env            map[string]string
	api            *cliAPI
}

func startTLSContext(t *testing.T) *tlsContext {
	t.Helper()
	certPEM, keyPEM, _ := testcert.New(t, "dwara-api")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	const token = "s3cret-token"
	url, store := apitest.StartTLS(t, token, cert)
	dir := t.TempDir()
	for name, content := range map[string]string{"ca.pem": string(certPEM), "prod.token": token + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "config.yaml")
	cfg := "current-context: prod\ncontexts:\n" +
		"  prod:\n    api: " + url + "\n    token-file: prod.token\n    certificate-authority: ca.pem\n    actor: carol\n" +
		"  no-ca:\n    api: " + url + "\n    token-file: prod.token\n"
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing else names the API, a token or an actor: no $DWARA_API_URL,
	// $DWARA_ADMIN_TOKEN or $USER.
	env := map[string]string{"DWARA_CONFIG": file, "HOME": dir}
	return &tlsContext{url: url, dir: dir, file: file, env: env, api: &cliAPI{url: url, store: store, env: env}}
}

// Every client verb, with -o json and with -o yaml, against an API served
// over TLS that wants a token, reached through the current context of a
// configuration file: the answers are JSON and YAML of the API's answer,
// and the changes are recorded as the context's actor.
func TestEveryVerbThroughTLSContext(t *testing.T) {
	t.Parallel()
	c := startTLSContext(t)
	a := c.api
	ctx := t.Context()
	fakeGateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Dwara-Branch") == "" {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	t.Cleanup(fakeGateway.Close)
	spec := spectest.Canary(90, 10).Analysis(config.CanaryAnalysis{Enabled: true, WindowSeconds: 60, Step: 5, MinRequests: 10,
		Promote:  config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
		Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05}}).
		Edit(func(s *config.Spec) {
			s.Services[0].Override = &config.Override{Header: "X-Dwara-Branch"}
			s.Services[0].Cache = &config.Cache{MaxBytes: 1 << 20}
		})
	file := writeSpec(t, "spec.yaml", spec.YAML())
	lock, err := a.store.TryCanaryLock(ctx)
	if err != nil || lock == nil {
		t.Fatalf("TryCanaryLock = %v, %v", lock, err)
	}
	t.Cleanup(func() { lock.Close(context.Background()) })
	// promote sets a transient weight on the active generation, so that
	// adopt has something to adopt.
	promote := func() {
		t.Helper()
		g := a.current(t)
		if _, ok, err := lock.Record(ctx, apiv1.CanaryEvent{GenerationID: g.ID, Service: "api", FromWeight: 10, ToWeight: 15,
			Action: apiv1.CanaryPromote, Reason: "step"}, 10); err != nil || !ok {
			t.Fatalf("Record = %v, %v", ok, err)
		}
	}

	upsFile, routesFile := filepath.Join(c.dir, "upstreams.yaml"), filepath.Join(c.dir, "routes.yaml")
	// exportRoutes writes the active generation's HTTPRoutes, for import.
	exportRoutes := func() {
		t.Helper()
		r := a.run(t, "export", "--format", "httproute", "--upstreams", upsFile)
		if r.code != 0 {
			t.Fatalf("export: %s", r)
		}
		if err := os.WriteFile(routesFile, []byte(r.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	driven := map[string]int{}
	for _, format := range []string{"json", "yaml"} {
		steps := []struct {
			args   []string
			before func()
			key    string // a top-level key of the answer
			// keyYAML, when set, is the key of the YAML answer.
			keyYAML string
		}{
			{args: []string{"apply", "-f", file}, key: "id"},
			{args: []string{"flip", "api"}, key: "id"},
			{args: []string{"flip", "api"}, key: "id"},
			{args: []string{"weights", "api", "api-stable=80", "api-canary=20"}, key: "id"},
			{args: []string{"history", "--limit", "3"}, key: "items"},
			{args: []string{"diff"}, key: "services"},
			{args: []string{"get", "services"}, key: "services"},
			{args: []string{"canary"}, key: "items"},
			{args: []string{"canary", "api"}, key: "items"},
			{args: []string{"pause", "api"}, key: "state"},
			{args: []string{"resume", "api"}, key: "state"},
			{args: []string{"adopt", "api"}, before: promote, key: "id"},
			{args: []string{"probe", "api", "--proxy", fakeGateway.URL, "--count", "2"}, key: "branches"},
			{args: []string{"cache", "purge", "api"}, key: "removed"},
			{args: []string{"kill", "api"}, key: "id"},
			{args: []string{"rollback", "1"}, key: "id"},
			{args: []string{"export", "--format", "httproute", "--upstreams", upsFile}, key: "items", keyYAML: "apiVersion"},
			{args: []string{"import", "-f", routesFile, "--upstreams", upsFile}, before: exportRoutes, key: "id"},
			{args: []string{"config", "view"}, key: "contexts"},
			{args: []string{"config", "get-contexts"}, key: "prod"},
		}
		for _, st := range steps {
			if st.before != nil {
				st.before()
			}
			args := append(slices.Clone(st.args), "-o", format)
			r := a.run(t, args...)
			if r.code != 0 {
				t.Fatalf("dwara %s: %s", strings.Join(args, " "), r)
			}
			var answer map[string]any
			if format == "json" {
				err = json.Unmarshal([]byte(r.stdout), &answer)
			} else {
				if strings.HasPrefix(strings.TrimSpace(r.stdout), "{") {
					t.Errorf("dwara %s printed JSON, not YAML:\n%s", strings.Join(args, " "), r.stdout)
				}
				err = yaml.Unmarshal([]byte(r.stdout), &answer)
			}
			key := st.key
			if format == "yaml" && st.keyYAML != "" {
				key = st.keyYAML
			}
			if _, ok := answer[key]; err != nil || !ok {
				t.Errorf("dwara %s: %v; the answer has no %q:\n%s", strings.Join(args, " "), err, key, r.stdout)
			}
			driven[st.args[0]]++
		}
	}
	for _, verb := range Verbs() {
		if driven[verb] < 2 {
			t.Errorf("verb %s was not driven with -o json and -o yaml", verb)
		}
	}
	if g := a.current(t); g.Author != "carol" {
		t.Errorf("the newest generation's author is %q, want carol (the context's actor)", g.Author)
	}

	// The other context has no CA: its certificate is not trusted, unless
	// the check is skipped, which the flag says.
	r := a.run(t, "--context", "no-ca", "history")
	if r.code != 1 || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("a context without the CA: %s; want exit 1 and a certificate error", r)
	}
	if r := a.run(t, "--context", "no-ca", "--insecure-skip-tls-verify", "history", "-o", "name"); r.code != 0 || !strings.HasPrefix(r.stdout, "generation/") {
		t.Errorf("--insecure-skip-tls-verify: %s", r)
	}
	// Global flags before the verb, and --cacert on the command line.
	if r := a.run(t, "--context", "no-ca", "--cacert", filepath.Join(c.dir, "ca.pem"), "canary", "-o", "name"); r.code != 0 || r.stdout != "service/api\n" {
		t.Errorf("--cacert before the verb: %s", r)
	}
	if r := a.run(t, "--context", "prd", "history"); r.code != 2 || !strings.Contains(r.stderr, `no context "prd"`) || !strings.Contains(r.stderr, `did you mean "prod"?`) {
		t.Errorf("an unknown context: %s", r)
	}
}

// config set-context, use-context, current-context and delete-context
// write the file (readable by its owner only), and the verbs follow it.
func TestConfigContexts(t *testing.T) {
	t.Parallel()
	c := startTLSContext(t)
	a := c.api
	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", cliSpecYAML(95, 5)))
	file := filepath.Join(t.TempDir(), "sub", "config.yaml")
	env := maps(c.env, map[string]string{"DWARA_CONFIG": file})
	run := func(args ...string) cliResult { return runVerb(t, env, "", args...) }

	if r := run("config", "current-context"); r.code != 1 || !strings.Contains(r.stderr, "no current context") {
		t.Errorf("current-context of no file: %s", r)
	}
	if r := run("config", "set-context", "prod", "--api", c.url, "--token-file", filepath.Join(c.dir, "prod.token"), "--cacert", filepath.Join(c.dir, "ca.pem"), "--actor", "dave"); r.code != 0 || !strings.Contains(r.stderr, `context "prod" created`) {
		t.Fatalf("set-context: %s", r)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the file after set-context: %v, %v; want mode 0600", fi, err)
	}
	if r := run("config", "set-context", "local", "--api", "127.0.0.1:9090"); r.code != 2 || !strings.Contains(r.stderr, "--api must be a URL with its scheme") {
		t.Errorf("set-context with a bare address: %s", r)
	}
	run("config", "set-context", "local", "--api", "http://127.0.0.1:1")
	if r := run("config", "current-context"); r.code != 0 || r.stdout != "prod\n" {
		t.Errorf("current-context: %s; want prod (the first set)", r)
	}
	if r := run("config", "get-contexts", "-o", "name"); r.stdout != "context/local\ncontext/prod\n" {
		t.Errorf("get-contexts -o name: %s", r)
	}
	if r := run("history", "-o", "name"); r.code != 0 || r.stdout != "generation/1\n" {
		t.Errorf("history through prod: %s", r)
	}
	if r := run("flip", "api", "-o", "name"); r.code != 0 || r.stdout != "generation/2\n" {
		t.Errorf("flip through prod: %s", r)
	}
	if g := a.current(t); g.Author != "dave" {
		t.Errorf("author %q, want dave (the context's actor)", g.Author)
	}
	if r := run("config", "use-context", "locl"); r.code != 2 || !strings.Contains(r.stderr, `did you mean "local"?`) {
		t.Errorf("use-context of a typo: %s", r)
	}
	if r := run("config", "use-context", "local"); r.code != 0 {
		t.Fatalf("use-context: %s", r)
	}
	if r := run("history"); r.code != 1 || !strings.Contains(r.stderr, "http://127.0.0.1:1") {
		t.Errorf("history through local: %s; want the local context's (unreachable) URL", r)
	}
	// The environment wins over the context, a flag over both.
	if r := runVerb(t, maps(env, map[string]string{"DWARA_API_URL": "http://127.0.0.1:2"}), "", "history"); !strings.Contains(r.stderr, "http://127.0.0.1:2") {
		t.Errorf("$DWARA_API_URL over the context: %s", r)
	}
	if r := run("history", "--context", "prod", "-o", "name"); r.code != 0 || r.stdout != "generation/2\ngeneration/1\n" {
		t.Errorf("--context prod: %s", r)
	}
	if r := run("config", "delete-context", "local"); r.code != 0 {
		t.Fatalf("delete-context: %s", r)
	}
	if r := run("config", "current-context"); r.code != 1 {
		t.Errorf("current-context after deleting it: %s", r)
	}
	if r := run("config", "view", "-o", "json"); r.code != 0 || strings.Contains(r.stdout, "local") || !strings.Contains(r.stdout, `"prod"`) {
		t.Errorf("view after the delete: %s", r)
	}
	if err := os.WriteFile(file, []byte("contexts:\n  prod:\n    url: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run("history"); r.code != 1 || !strings.Contains(r.stderr, `unknown field "url"`) {
		t.Errorf("a file with an unknown field: %s", r)
	}
}

// A change with no actor (no --actor, none in the context, no $USER or
// $LOGNAME) is refused before anything is sent, after the verb's own
// argument checks; a read needs none.
func TestNoActor(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	env := maps(a.env, map[string]string{"USER": ""})
	if r := runVerb(t, env, "", "apply"); r.code != 2 || !strings.Contains(r.stderr, "-f FILE is required") {
		t.Errorf("apply with no -f and no actor: %s; want the -f problem first", r)
	}
	r := runVerb(t, env, "", "apply", "-f", writeSpec(t, "spec.yaml", cliSpecYAML(95, 5)))
	if r.code != 2 || !strings.Contains(r.stderr, "who makes the change? give --actor NAME") {
		t.Errorf("apply with no actor: %s", r)
	}
	if n := a.count(t); n != 0 {
		t.Errorf("%d generations stored by a change with no actor", n)
	}
	if r := runVerb(t, env, "", "history"); r.code != 0 {
		t.Errorf("history with no actor: %s", r)
	}
	if r := runVerb(t, maps(env, map[string]string{"LOGNAME": "erin"}), "", "apply", "-f", writeSpec(t, "spec.yaml", cliSpecYAML(95, 5))); r.code != 0 || !strings.Contains(r.stdout, "by erin") {
		t.Errorf("apply with $LOGNAME: %s", r)
	}
}

// Unknown names get a "did you mean"; a weights change that leaves no
// weight at all is not told to --allow-reshuffle.
func TestNearMisses(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", cliSpecYAML(95, 5)))
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"flip", "apo"}, `404 Not Found: service "apo" does not exist in generation 1; did you mean "api"?`},
		{[]string{"weights", "api", "api-stabel=90"}, `"api-stabel" is not a target of service "api"; its targets are "api-stable", "api-canary"; did you mean "api-stable"?`},
		{[]string{"pause", "apj"}, `did you mean "api"?`},
		{[]string{"weights", "api", "api-stable=0", "api-canary=0"}, "hint: these weights leave the split no weight at all"},
		{[]string{"weights", "api", "api-stable=10", "api-canary=10"}, "hint: keep the total, or add --allow-reshuffle"},
	} {
		r := a.run(t, tt.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("dwara %s: %s\nwant %q", strings.Join(tt.args, " "), r, tt.want)
		}
	}
	if r := a.run(t, "weights", "api", "api-stable=0", "api-canary=0"); strings.Contains(r.stderr, "--allow-reshuffle") {
		t.Errorf("a zero total suggests --allow-reshuffle: %s", r)
	}
	if n := a.count(t); n != 1 {
		t.Errorf("%d generations, want 1: a refused change stored one", n)
	}
}

// -o wide and -o name print their own shapes; a verb refuses a format it
// does not print.
func TestOutputShapes(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", cliSpecYAML(95, 5)))
	a.must(t, "flip", "api")
	if out := a.must(t, "history", "-o", "name"); out != "generation/2\ngeneration/1\n" {
		t.Errorf("history -o name = %q", out)
	}
	wide := a.must(t, "history", "-o", "wide")
	if first, _, _ := strings.Cut(wide, "\n"); !strings.HasPrefix(first, "ID") || !strings.Contains(first, "PARENT") {
		t.Errorf("history -o wide has no PARENT column:\n%s", wide)
	}
	// The parent of generation 2 is 1.
	if fields := strings.Fields(strings.Split(wide, "\n")[1]); len(fields) < 2 || fields[0] != "2" || fields[1] != "1" {
		t.Errorf("history -o wide: the first row %q, want id 2 and parent 1", fields)
	}
	if out := a.must(t, "diff", "-o", "name"); out != "service/api\n" {
		t.Errorf("diff -o name = %q", out)
	}
	if out := a.must(t, "flip", "api", "-o", "name"); out != "generation/3\n" {
		t.Errorf("flip -o name = %q", out)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"flip", "api", "-o", "wide"}, `--output must be one of json, yaml, name for flip, not "wide"`},
		{[]string{"history", "-o", "xml"}, `--output must be one of json, yaml, wide, name for history, not "xml"`},
	} {
		if r := a.run(t, tt.args...); r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("dwara %s: %s", strings.Join(tt.args, " "), r)
		}
	}
	// --json is -o json.
	var g apiv1.Generation
	if err := json.Unmarshal([]byte(a.must(t, "flip", "api", "--json")), &g); err != nil || strconv.FormatInt(g.ID, 10) != "4" {
		t.Errorf("flip --json: %+v, %v", g, err)
	}
}
