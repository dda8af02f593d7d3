// Package prometheus holds Dwara's Prometheus recording and alerting
// rules, dwara.rules.yml, their promtool unit tests, dwara.rules_test.yml,
// and the tests that run them. It has no code of its own: load the rules
// with rule_files: in prometheus.yml, or apply the PrometheusRule of
// deploy/kubernetes/overlays/production-monitoring, which holds the same
// groups (TestPrometheusRuleInSync; `go test ./deploy/prometheus -update`
// writes it from dwara.rules.yml).
//
// TestRules runs promtool (Prometheus's own checker) when it is found:
// $DWARA_PROMTOOL, which CI sets and which then must exist, else promtool
// on PATH (Debian's prometheus package has it). TestRuleConventions checks
// without it what every alert must carry.
package prometheus

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dwara/dwara/internal/testdocs"
)

const (
	rulesFile     = "dwara.rules.yml"
	rulesTestFile = "dwara.rules_test.yml"
	// prometheusRuleFile is the PrometheusRule of the monitoring overlay.
	prometheusRuleFile = "../kubernetes/overlays/production-monitoring/prometheusrule.yaml"
)

var update = flag.Bool("update", false, "write "+prometheusRuleFile+" from "+rulesFile)

// severities are the values of an alert's severity label: critical pages,
// warning opens a ticket.
var severities = []string{"critical", "warning"}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// unitTests is the part of a promtool unit test file the tests read.
type unitTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		PromqlExprTest []struct {
			Expr string `yaml:"expr"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

// decodeFile decodes the YAML file name into into; strict refuses fields
// into lacks (the rule file is decoded whole, the unit tests in part).
func decodeFile(t *testing.T, name string, into any, strict bool) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(strict)
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// promtoolBinary returns the promtool to run: $DWARA_PROMTOOL when it is
// set (the test then fails when it is missing instead of skipping), else
// promtool on PATH; "" when there is none.
func promtoolBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DWARA_PROMTOOL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("DWARA_PROMTOOL=%s: %v (.ci/run installs Debian's prometheus package, which has /usr/bin/promtool)", p, err)
		}
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	return ""
}

// promtool runs promtool with args in dir, within a minute, and returns
// its output; a failure fails t with it.
func promtool(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRules: promtool finds the rule file valid and every unit test of
// dwara.rules_test.yml passes.
func TestRules(t *testing.T) {
	t.Parallel()
	bin := promtoolBinary(t)
	if bin == "" {
		t.Skip("promtool not found: install Debian's prometheus package, or set DWARA_PROMTOOL")
	}
	out := promtool(t, bin, ".", "check", "rules", rulesFile)
	var f ruleFile
	decodeFile(t, rulesFile, &f, true)
	n := 0
	for _, g := range f.Groups {
		n += len(g.Rules)
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", n); !strings.Contains(out, want) {
		t.Errorf("promtool check rules said %q, want %q", out, want)
	}
	if out := promtool(t, bin, ".", "test", "rules", rulesTestFile); !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules said %q", out)
	}
}

// metricRE finds the metric names of an expression or an annotation:
// the identifiers that start with dwara_ and have no colon (a recorded
// series has one).
var metricRE = regexp.MustCompile(`\bdwara_[a-zA-Z0-9_]+\b:?`)

// metricsIn returns the dwara metrics that s names.
func metricsIn(s string) []string {
	var out []string
	for _, m := range metricRE.FindAllString(s, -1) {
		if !strings.HasSuffix(m, ":") {
			out = append(out, m)
		}
	}
	return out
}

// TestRuleConventions checks what every rule must carry: an alert has a
// severity of severities, a summary, a description and a runbook; the
// runbook names a metric of the README's Metrics table and links
// sections that exist in the README (or in docs/); every metric an expression reads is
// one the README documents; the README's Alerts table lists every alert
// with its severity; every alert has a unit test where it fires
// and one where it must not, and every recording rule one that evaluates
// it.
func TestRuleConventions(t *testing.T) {
	t.Parallel()
	var f ruleFile
	decodeFile(t, rulesFile, &f, true)
	documented := readmeMetrics(t)
	headings := anchors(t)

	var tests unitTests
	decodeFile(t, rulesTestFile, &tests, false)
	if !slices.Equal(tests.RuleFiles, []string{rulesFile}) {
		t.Errorf("%s tests rule files %v, want [%s]", rulesTestFile, tests.RuleFiles, rulesFile)
	}
	fires, silent, evaluated := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
		for _, e := range tc.PromqlExprTest {
			evaluated[strings.TrimSpace(e.Expr)] = true
		}
	}

	alertsSection := testdocs.Section(t, "../..", "Alerts")

	alerts := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			for _, m := range metricsIn(r.Expr) {
				if base := histogramBase(m); !documented[base] {
					t.Errorf("%s reads %s, which the README's Metrics table does not document", name, m)
				}
			}
			if r.Record != "" {
				if !evaluated[r.Record] {
					t.Errorf("recording rule %s: no promql_expr_test of %s evaluates it", r.Record, rulesTestFile)
				}
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			alerts[r.Alert] = true
			if !strings.Contains(alertsSection, "| `"+r.Alert+"` | "+r.Labels["severity"]+" |") {
				t.Errorf("alert %s: the README's Alerts table has no row for it with severity %s", r.Alert, r.Labels["severity"])
			}
			if !slices.Contains(severities, r.Labels["severity"]) {
				t.Errorf("alert %s: severity %q, want one of %v", r.Alert, r.Labels["severity"], severities)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, a)
				}
			}
			runbook := r.Annotations["runbook"]
			if ms := metricsIn(runbook); !slices.ContainsFunc(ms, func(m string) bool { return documented[m] }) {
				t.Errorf("alert %s: the runbook names no metric of the README's Metrics table: %q", r.Alert, runbook)
			}
			links := linkRE.FindAllStringSubmatch(runbook, -1)
			for _, l := range links {
				if !headings[l[1]][l[2]] {
					t.Errorf("alert %s: the runbook links %s#%s, which is no heading of %s", r.Alert, l[1], l[2], l[1])
				}
			}
			if len(links) == 0 {
				t.Errorf("alert %s: the runbook links no section (README.md#anchor)", r.Alert)
			}
			if !fires[r.Alert] {
				t.Errorf("alert %s: no unit test of %s where it fires", r.Alert, rulesTestFile)
			}
			if !silent[r.Alert] {
				t.Errorf("alert %s: no unit test of %s where it must not fire", r.Alert, rulesTestFile)
			}
		}
	}
	for name := range fires {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTestFile, name, rulesFile)
		}
	}
}

// histogramBase is the metric a histogram's series belongs to.
func histogramBase(m string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(m, s); ok {
			return b
		}
	}
	return m
}

// linkRE finds the links of a runbook to a section: README.md#anchor or
// docs/page.md#anchor.
var linkRE = regexp.MustCompile(`\b((?:README|docs/[a-z0-9-]+)\.md)#([a-z0-9-]*)`)

// anchors returns the anchor of every heading of the Markdown files of
// the module, as GitHub makes them (lowercase; letters, digits, hyphens
// and underscores kept; spaces made hyphens; everything else dropped), by
// file.
func anchors(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for _, name := range testdocs.Files(t, "../..") {
		data, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = map[string]bool{}
		fence := false
		for line := range strings.Lines(string(data)) {
			if strings.HasPrefix(line, "```") {
				fence = !fence
			}
			h, ok := strings.CutPrefix(line, "#")
			if !ok || fence {
				continue
			}
			var b strings.Builder
			for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#"))) {
				switch {
				case r == ' ':
					b.WriteByte('-')
				case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
					b.WriteRune(r)
				}
			}
			out[name][b.String()] = true
		}
	}
	return out
}

// readmeMetrics returns the metric names of the documentation's Metrics
// table (docs/observability.md).
func readmeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for line := range strings.Lines(testdocs.Section(t, "../..", "Metrics")) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range metricRE.FindAllString(first, -1) {
			names[m] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("read %d metrics from the Metrics table: %v", len(names), names)
	}
	return names
}

// prometheusRule is the PrometheusRule of the monitoring overlay as
// generated from the rule file: its groups, indented under spec.
func prometheusRule(t *testing.T) []byte {
	t.Helper()
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(rules, []byte("\ngroups:\n"))
	if i < 0 {
		t.Fatalf("%s has no top-level groups:", rulesFile)
	}
	var b bytes.Buffer
	b.WriteString(`# Dwara's recording and alerting rules for the Prometheus Operator: the
# groups of deploy/prometheus/dwara.rules.yml (README.md, "Alerts"). Do not
# edit: ` + "`go test ./deploy/prometheus -update`" + ` writes this file from that one,
# and TestPrometheusRuleInSync fails while they differ. Your Prometheus must
# select PrometheusRules of this namespace (its ruleNamespaceSelector and
# ruleSelector).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: dwara
  labels:
    app.kubernetes.io/name: dwara
    app.kubernetes.io/component: monitoring
    app.kubernetes.io/part-of: dwara
spec:
`)
	for line := range strings.Lines(string(rules[i+1:])) {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes()
}

// TestPrometheusRuleInSync: the monitoring overlay's PrometheusRule holds
// exactly the groups of dwara.rules.yml (and decodes to the same rules).
func TestPrometheusRuleInSync(t *testing.T) {
	t.Parallel()
	want := prometheusRule(t)
	if *update {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s's groups: go test ./deploy/prometheus -update writes it", prometheusRuleFile, rulesFile)
	}
	var pr struct {
		Spec ruleFile `yaml:"spec"`
	}
	if err := yaml.Unmarshal(got, &pr); err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	decodeFile(t, rulesFile, &f, true)
	if fmt.Sprint(pr.Spec) != fmt.Sprint(f) || len(f.Groups) == 0 {
		t.Errorf("the PrometheusRule's groups decode to\n%v\nthe rule file's to\n%v", pr.Spec, f)
	}
}
