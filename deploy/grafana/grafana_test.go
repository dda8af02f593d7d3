// Package grafana holds Dwara's Grafana dashboard, dwara.json, and its test:
// every metric the dashboard queries must be one a running `dwara serve`
// exports, with the labels the queries use, and every metric the README
// documents must be on the dashboard; every query is filtered by the job
// and instance variables and uses $__rate_interval (TestDashboardQueries);
// and promtool, where it is found, evaluates every query against the
// series serve exported, as two data planes would (evaluateQueries). It
// has no code of its own: import dwara.json into Grafana (Dashboards > New
// > Import) and pick the Prometheus data source that scrapes Dwara.
package grafana

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/internal/fakeai"
	"github.com/dwara/dwara/internal/testdocs"
	"github.com/dwara/dwara/node"
)

// wait bounds every wait of the test.
const wait = 60 * time.Second

// promLabels are added by Prometheus when it scrapes, so no exposition
// carries them.
var promLabels = []string{"instance", "job"}

// dashboard is the part of a Grafana dashboard model the test reads.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

// variable is a templating variable; Query is a string or an object with
// a query string, by the variable's type.
type variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

// query is one PromQL expression of the dashboard and where it is.
type query struct {
	where, expr string
}

func load(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile("dwara.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dwara.json: %v", err)
	}
	return d
}

// queries returns every PromQL expression of d: the panels' targets, the
// annotations, and the templating variables' label_values queries, these
// as the selector they read (with the label they list in label).
func queries(t *testing.T, d dashboard) (qs []query, labelValues map[string]string) {
	t.Helper()
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				qs = append(qs, query{fmt.Sprintf("panel %q (%s)", p.Title, tg.RefID), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			qs = append(qs, query{fmt.Sprintf("annotation %q", a.Name), a.Expr})
		}
	}
	labelValues = map[string]string{}
	lv := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
			continue
		}
		m := lv.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
			continue
		}
		where := fmt.Sprintf("variable %s", v.Name)
		qs = append(qs, query{where, m[1]})
		labelValues[where] = m[2]
	}
	return qs, labelValues
}

// TestDashboardModel checks the dashboard's structure: unique panel ids,
// panels on the 24-column grid without overlaps, every query panel on the
// dashboard's data source variable with unique refIds.
func TestDashboardModel(t *testing.T) {
	t.Parallel()
	d := load(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed", d.UID, d.Title)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v variable) bool { return v.Name == "datasource" && v.Type == "datasource" }) {
		t.Error("no datasource variable: the dashboard must not name a data source of one installation")
	}
	ids := map[int]string{}
	type rect struct {
		title      string
		x, y, w, h int
	}
	var placed []rect
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, other)
			}
			ids[p.ID] = p.Title
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v off the 24-column grid", p.Title, g)
			}
			r := rect{p.Title, g.X, g.Y, g.W, g.H}
			for _, o := range placed {
				if r.x < o.x+o.w && o.x < r.x+r.w && r.y < o.y+o.h && o.y < r.y+r.h {
					t.Errorf("panels %q and %q overlap", r.title, o.title)
				}
			}
			placed = append(placed, r)
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" || p.Datasource.Type != "prometheus" {
				t.Errorf("panel %q: data source %+v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refs[tg.RefID] || strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q: target %q with expr %q (refIds must be unique, exprs set)", p.Title, tg.RefID, tg.Expr)
				}
				refs[tg.RefID] = true
			}
		}
	}
	walk(d.Panels)
}

// TestDashboardMetrics starts dwara serve, sends traffic through a sticky
// split and two canary groups (one healthy, promoted; one failing, rolled
// back) so that every series exists, scrapes /metrics, and checks each
// metric name and label the dashboard's queries use against it. It also
// checks that every metric of the README's Metrics table is on the
// dashboard.
func TestDashboardMetrics(t *testing.T) {
	t.Parallel()
	d := load(t)
	qs, labelValues := queries(t, d)
	exported, exposition := metricsOfServe(t)

	used := map[string]bool{}
	for _, q := range qs {
		sels, grouping, err := parse(q.expr)
		if err != nil {
			t.Errorf("%s: %v in %q", q.where, err, q.expr)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
		have := map[string]bool{} // the labels of the metrics of q
		for _, l := range promLabels {
			have[l] = true
		}
		for _, s := range sels {
			used[s.name] = true
			labels, ok := exported[s.name]
			if !ok {
				t.Errorf("%s: metric %s is not exported by dwara serve", q.where, s.name)
				continue
			}
			for l := range labels {
				have[l] = true
			}
			for _, l := range s.labels {
				if !labels[l] && !slices.Contains(promLabels, l) {
					t.Errorf("%s: %s has no label %q (it has %v)", q.where, s.name, l, keys(labels))
				}
			}
		}
		for _, l := range grouping {
			if !have[l] {
				t.Errorf("%s: groups by label %q, which none of its metrics has", q.where, l)
			}
		}
		if l, ok := labelValues[q.where]; ok && !have[l] {
			t.Errorf("%s: lists the values of label %q, which its metric lacks", q.where, l)
		}
	}

	// Every documented metric is on the dashboard (a histogram by its
	// _bucket, _sum or _count series).
	for _, m := range readmeMetrics(t) {
		if !used[m] && !used[m+"_bucket"] && !used[m+"_sum"] && !used[m+"_count"] {
			t.Errorf("the README documents %s; the dashboard does not show it", m)
		}
	}
	var unused []string
	for name := range exported {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "dwara_") && !used[name] && !used[base+"_bucket"] && !used[base] {
			unused = append(unused, name)
		}
	}
	slices.Sort(unused)
	if len(unused) > 0 {
		t.Logf("exported but not on the dashboard: %v", unused)
	}

	t.Run("promtool", func(t *testing.T) { evaluateQueries(t, d, exposition) })
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// readmeMetrics returns the metric names of the documentation's Metrics
// table (docs/observability.md).
func readmeMetrics(t *testing.T) []string {
	t.Helper()
	section := testdocs.Section(t, "../..", "Metrics")
	var names []string
	for line := range strings.Lines(section) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range regexp.MustCompile("`(dwara_[a-z0-9_]+)").FindAllStringSubmatch(first, -1) {
			names = append(names, m[1])
		}
	}
	if len(names) < 10 {
		t.Fatalf("read %d metrics from the Metrics table: %v", len(names), names)
	}
	return names
}

// selector is a metric name an expression selects, with the label names
// of its matchers and each matcher (label, operator, quoted value) by
// label.
type selector struct {
	name     string
	labels   []string
	matchers map[string]string
}

func (s selector) String() string { return fmt.Sprintf("{%s %v}", s.name, s.labels) }

// promqlWords are the keywords and operators of PromQL that look like
// identifiers.
var promqlWords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
	"group_left", "group_right", "inf", "nan", "atan2"}

// aggregators are PromQL's aggregation operators, which may take their by
// or without clause before their arguments.
var aggregators = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
	"bottomk", "topk", "quantile", "limitk", "limit_ratio"}

var (
	identRE   = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	matcherRE = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*,?`)
	labelsRE  = regexp.MustCompile(`^\(\s*((?:[a-zA-Z_][a-zA-Z0-9_]*\s*,?\s*)*)\)`)
)

// parse reads what the test needs of a PromQL expression: the metrics it
// selects with their matchers' labels, and the labels of its by, without,
// on, ignoring and group_* clauses. Strings, ranges and numbers are
// skipped; an identifier followed by "(" is a function.
func parse(expr string) (sels []selector, grouping []string, err error) {
	s := expr
	for len(s) > 0 {
		c := s[0]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || strings.ContainsRune("()+-*/%^<>=!,", rune(c)):
			s = s[1:]
		case c == '"' || c == '\'' || c == '`':
			end := strings.IndexByte(s[1:], c)
			if end < 0 {
				return nil, nil, fmt.Errorf("unterminated string")
			}
			s = s[end+2:]
		case c == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, nil, fmt.Errorf("unterminated range")
			}
			s = s[end+1:]
		case c == '{':
			return nil, nil, fmt.Errorf("a selector without a metric name")
		case c >= '0' && c <= '9' || c == '.':
			n := 1
			for n < len(s) && (s[n] >= '0' && s[n] <= '9' || strings.IndexByte(".eE_smhdwy", s[n]) >= 0) {
				n++
			}
			s = s[n:]
		default:
			id := identRE.FindString(s)
			if id == "" {
				return nil, nil, fmt.Errorf("unexpected %q", s[:1])
			}
			s = s[len(id):]
			rest := strings.TrimLeft(s, " \t\n")
			switch {
			case slices.Contains(promqlWords, id):
				if m := labelsRE.FindStringSubmatch(rest); m != nil && id != "bool" && id != "offset" {
					for l := range strings.SplitSeq(m[1], ",") {
						if l = strings.TrimSpace(l); l != "" {
							grouping = append(grouping, l)
						}
					}
					s = rest[len(m[0]):]
				}
			case strings.HasPrefix(rest, "("),
				slices.Contains(aggregators, id) && (strings.HasPrefix(rest, "by") || strings.HasPrefix(rest, "without")):
				// A function call or an aggregation: its arguments follow.
			default:
				sel := selector{name: id, matchers: map[string]string{}}
				if strings.HasPrefix(rest, "{") {
					body := rest[1:]
					for !strings.HasPrefix(strings.TrimLeft(body, " "), "}") {
						m := matcherRE.FindStringSubmatch(body)
						if m == nil {
							return nil, nil, fmt.Errorf("bad matchers of %s at %q", id, body)
						}
						sel.labels = append(sel.labels, m[1])
						sel.matchers[m[1]] = m[1] + m[2] + m[3]
						body = body[len(m[0]):]
					}
					s = strings.TrimLeft(body, " ")[1:]
				}
				sels = append(sels, sel)
			}
		}
	}
	return sels, grouping, nil
}

func TestParse(t *testing.T) {
	t.Parallel()
	sels, grouping, err := parse(`sum by (service, le) (rate(a_bucket{x=~"$x", y!="a,b}"}[$__rate_interval])) / ignoring (upstream) group_left () b * on (instance, job) (c == 1) or vector(0) > 0.5`)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(sels, grouping)
	if want := `[{a_bucket [x y]} {b []} {c []}] [service le upstream instance job]`; got != want {
		t.Errorf("parse = %s, want %s", got, want)
	}
	if _, _, err := parse(`sum({x="y"})`); err == nil {
		t.Error("a selector without a name parsed")
	}
}

// metricsOfServe runs dwara serve with traffic through every kind of
// service, and returns the series names of its /metrics with the label
// names each has, and the exposition they were read from.
func metricsOfServe(t *testing.T) (map[string]map[string]bool, string) {
	t.Helper()
	stable := startPool(t, "stable", 2)
	canary := startPool(t, "canary", 1)
	broken := startPool(t, "broken", 1)
	broken.SetFailRate(1)
	llm := httptest.NewServer(fakeai.New(fakeai.Options{Name: "llm"}))
	t.Cleanup(llm.Close)

	started := make(chan node.Addrs, 1)
	applied := make(chan int64, 16)
	cfg := node.ServeConfig{DatabaseURL: dbtest.New(t), AdminListen: "127.0.0.1:0"}
	cfg.Listen = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.CanaryInterval = 50 * time.Millisecond
	cfg.Started = func(a node.Addrs) { started <- a }
	cfg.Applied = func(g int64) {
		select {
		case applied <- g:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.Serve(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dwara serve returned %v", err)
			}
		case <-time.After(wait):
			t.Errorf("dwara serve did not stop within %v", wait)
		}
	})
	var addrs node.Addrs
	select {
	case addrs = <-started:
	case err := <-done:
		t.Fatalf("dwara serve: %v", err)
	case <-time.After(wait):
		t.Fatalf("dwara serve did not start within %v", wait)
	}

	analysis := `"canary_analysis": {"enabled": true, "window_seconds": 30, "step": 10, "min_requests": 20, "cooldown_seconds": 1,
		"promote": {"metric": "error_rate", "threshold": 0.01}, "rollback": {"metric": "error_rate", "threshold": 0.05}}`
	spec := fmt.Sprintf(`{"message": "grafana test", "spec": {
		"upstreams": [
			{"name": "stable", "endpoints": %s},
			{"name": "canary", "endpoints": %s},
			{"name": "broken", "endpoints": %s},
			{"name": "llm", "endpoints": [%q]}
		],
		"services": [
			{"name": "web", "base_path": "/", "sticky": {"cookie": "dwara_affinity", "ttl_s": 3600},
			 "split": {"targets": [{"upstream": "stable", "weight": 90}, {"upstream": "canary", "weight": 10}],
			           "match": [{"name": "beta", "headers": {"X-Group": {"exact": "beta"}}, "target": "canary"}]},
			 "override": {"header": "X-Dwara-Branch"}, "mirror": {"upstream": "broken", "percent": 50}},
			{"name": "shop", "base_path": "/shop",
			 "split": {"targets": [{"upstream": "stable", "weight": 90}, {"upstream": "canary", "weight": 10}], %s}},
			{"name": "cart", "base_path": "/cart",
			 "split": {"targets": [{"upstream": "stable", "weight": 90}, {"upstream": "broken", "weight": 10}], %s}},
			{"name": "llm", "base_path": "/v1", "upstream": "llm",
			 "models": [{"alias": "chat", "targets": [{"upstream": "llm", "model": "fake-a"}]}]},
			{"name": "static", "base_path": "/static", "upstream": "stable",
			 "cache": {"max_bytes": 1048576, "default_ttl_s": 60}}
		]}}`, jsonList(stable.Addrs), jsonList(canary.Addrs), jsonList(broken.Addrs), strings.TrimPrefix(llm.URL, "http://"), analysis, analysis)
	admin := "http://" + addrs.Admin
	resp, err := client.Post(admin+"/api/v1/generations", "application/json", strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish: status %d: %s", resp.StatusCode, body)
	}
	select {
	case <-applied:
	case <-time.After(wait):
		t.Fatalf("the generation was not applied within %v", wait)
	}

	// A streamed and a plain completion of the alias (its requests, time
	// to first token and tokens), and a page of the cached service twice
	// (a miss, then a hit).
	for _, body := range []string{
		`{"model": "chat", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "hi"}]}`,
		`{"model": "chat", "messages": [{"role": "user", "content": "hi"}]}`,
	} {
		resp, err := client.Post("http://"+addrs.Proxy+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a completion of the alias: status %d", resp.StatusCode)
		}
	}
	get(t, "http://"+addrs.Proxy+"/static/page")
	get(t, "http://"+addrs.Proxy+"/static/page")

	// Traffic until the controller promoted shop and rolled cart back, so
	// that their counters exist too.
	deadline := time.Now().Add(wait)
	for i := 0; ; i++ {
		if i%25 == 0 {
			m, body := scrape(t, admin)
			// The canary counters exist at 0 from the start: wait for the
			// actions themselves (a promotion and a rollback counted).
			if m["dwara_canary_promotions_total"] != nil && m["dwara_canary_rollbacks_total"] != nil &&
				m["dwara_canary_window_requests"] != nil && m["dwara_requests_total"] != nil &&
				counted(body, "dwara_canary_promotions_total") && counted(body, "dwara_canary_rollbacks_total") {
				return m, body
			}
		}
		if i >= 10000 || time.Now().After(deadline) {
			t.Fatalf("no promotion of shop and rollback of cart after %d rounds of requests", i)
		}
		for _, path := range []string{"/", "/shop/", "/cart/"} {
			get(t, "http://"+addrs.Proxy+path)
		}
	}
}

var client = &http.Client{Timeout: wait}

func startPool(t *testing.T, name string, n int) *demo.Pool {
	t.Helper()
	p, err := demo.StartPool(name, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func jsonList(xs []string) string {
	b, _ := json.Marshal(xs)
	return string(b)
}

// get sends one GET with a fresh request id (the split's key); the answer
// does not matter.
func get(t *testing.T, url string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-Request-Id", rand.Text())
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+`)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)

// scrape returns the series names of /metrics at admin with the label
// names each has, and the exposition.
func scrape(t *testing.T, admin string) (map[string]map[string]bool, string) {
	t.Helper()
	resp, err := client.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, %v", resp.StatusCode, err)
	}
	out := map[string]map[string]bool{}
	for line := range strings.Lines(string(body)) {
		m := sampleRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		if out[m[1]] == nil {
			out[m[1]] = map[string]bool{}
		}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			out[m[1]][l[1]] = true
		}
	}
	return out, string(body)
}

// counted reports whether a series of the counter name in the metrics
// text body has a value above 0.
func counted(body, name string) bool {
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		if v := f[len(f)-1]; v != "0" {
			return true
		}
	}
	return false
}
