package config

import (
	"strings"
	"testing"
)

const modelsSpec = `upstreams:
  - {name: openai-a, endpoints: ["127.0.0.1:9001"]}
  - {name: vllm-b, endpoints: ["127.0.0.1:9101"]}
services:
  - name: llm
    base_path: /v1
    upstream: openai-a
%s
`

func modelsYAML(rest string) []byte {
	return []byte(strings.Replace(modelsSpec, "%s", rest, 1))
}

// Model aliases decode with their targets (an absent weight is 1) and
// survive a clone apart.
func TestModelsParse(t *testing.T) {
	t.Parallel()
	spec, err := Parse(modelsYAML(`    max_body_bytes: 65536
    models:
      - alias: chat-prod
        affinity: user
        targets:
          - {upstream: openai-a, model: gpt-4o, weight: 95}
          - {upstream: vllm-b, model: llama-3.1-70b-instruct}`))
	if err != nil {
		t.Fatal(err)
	}
	svc := spec.Services[0]
	a := svc.Models[0]
	if a.Alias != "chat-prod" || a.Affinity != "user" || len(a.Targets) != 2 || a.Targets[0].Weight != 95 || a.Targets[1].Weight != 1 ||
		a.Targets[1].Model != "llama-3.1-70b-instruct" || svc.MaxBodyBytes != 65536 {
		t.Errorf("service %+v", svc)
	}
	c := spec.Clone()
	c.Services[0].Models[0].Targets[0].Model = "x"
	if spec.Services[0].Models[0].Targets[0].Model != "gpt-4o" {
		t.Error("a clone's alias shares its targets with the original")
	}
}

func TestModelsValidate(t *testing.T) {
	t.Parallel()
	const p = "services[0].models"
	for _, tt := range []struct {
		name string
		rest string
		want []problem
	}{
		{"duplicate alias", `    models:
      - {alias: chat, targets: [{upstream: openai-a, model: gpt-4o}]}
      - {alias: chat, targets: [{upstream: vllm-b, model: llama}]}`,
			[]problem{{p + "[1].alias", `duplicate alias "chat" (also ` + p + `[0])`, ""}}},
		{"no targets", `    models:
      - {alias: chat, targets: []}`,
			[]problem{{p + "[0].targets", "must list 1..8 targets, got 0", ""}}},
		{"unknown upstream", `    models:
      - {alias: chat, targets: [{upstream: vllm-c, model: llama}]}`,
			[]problem{{p + "[0].targets[0].upstream", `unknown upstream "vllm-c"; did you mean "vllm-b"?`, ""}}},
		{"empty model", `    models:
      - {alias: chat, targets: [{upstream: vllm-b, model: ""}]}`,
			[]problem{{p + "[0].targets[0].model", "is required", ""}}},
		{"empty alias", `    models:
      - {alias: "", targets: [{upstream: vllm-b, model: llama}]}`,
			[]problem{{p + "[0].alias", "is required", ""}}},
		{"negative weight", `    models:
      - {alias: chat, targets: [{upstream: vllm-b, model: llama, weight: -1}, {upstream: openai-a, model: gpt}]}`,
			[]problem{{p + "[0].targets[0].weight", "must be 0..1000000, got -1", ""}}},
		{"zero total", `    models:
      - {alias: chat, targets: [{upstream: vllm-b, model: llama, weight: 0}]}`,
			[]problem{{p + "[0].targets", "total weight must be 1..1000000, got 0", ""}}},
		{"bad affinity", `    models:
      - {alias: chat, affinity: session, targets: [{upstream: vllm-b, model: llama}]}`,
			[]problem{{p + "[0].affinity", `unknown affinity "session"; allowed: user, header:NAME, cookie, none`, ""}}},
		{"bad affinity header", `    models:
      - {alias: chat, affinity: "header:X Y", targets: [{upstream: vllm-b, model: llama}]}`,
			[]problem{{p + "[0].affinity", "header:NAME needs an HTTP field name", ""}}},
		{"cookie without sticky", `    models:
      - {alias: chat, affinity: cookie, targets: [{upstream: vllm-b, model: llama}]}`,
			[]problem{{p + "[0].affinity", "the service has no sticky", ""}}},
		{"canary on one target", `    models:
      - alias: chat
        targets: [{upstream: vllm-b, model: llama, weight: 10}]
        canary_analysis: {enabled: true, promote: {metric: error_rate, threshold: 0.01}, rollback: {metric: error_rate, threshold: 0.05}}`,
			[]problem{{p + "[0].canary_analysis", "needs exactly 2 targets (baseline, canary), got 1", ""}}},
		{"canary unknown metric", `    models:
      - alias: chat
        targets: [{upstream: vllm-b, model: llama, weight: 90}, {upstream: openai-a, model: gpt, weight: 10}]
        canary_analysis: {enabled: true, promote: {metric: error_rate, threshold: 0.01}, rollback: {metric: ttft_p50, threshold: 2}}`,
			[]problem{{p + "[0].canary_analysis.rollback.metric", `unknown metric "ttft_p50"; allowed: error_rate, latency_p99, ttft_p99`, ""}}},
		{"canary ttft threshold", `    models:
      - alias: chat
        targets: [{upstream: vllm-b, model: llama, weight: 90}, {upstream: openai-a, model: gpt, weight: 10}]
        canary_analysis: {enabled: true, promote: {metric: error_rate, threshold: 0.01}, rollback: {metric: ttft_p99, threshold: 0}}`,
			[]problem{{p + "[0].canary_analysis.rollback.threshold", "must be in (0, 600] for ttft_p99 (seconds), got 0", ""}}},
		{"max_body_bytes too large", `    max_body_bytes: 99999999999
    models:
      - {alias: chat, targets: [{upstream: vllm-b, model: llama}]}`,
			[]problem{{"services[0].max_body_bytes", "must be 1..33554432", ""}}},
		{"max_body_bytes without models", `    max_body_bytes: 1024`,
			[]problem{{"services[0].max_body_bytes", "applies only to a service with models", ""}}},
		{"unknown target field", `    models:
      - {alias: chat, targets: [{upstream: vllm-b, model: llama, weigth: 2}]}`,
			[]problem{{p + "[0].targets[0].weigth", "unknown field", ""}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(modelsYAML(tt.rest))
			checkProblems(t, err, tt.want...)
		})
	}
}

// Diff names what changed in a service's aliases.
func TestModelsDiff(t *testing.T) {
	t.Parallel()
	parse := func(rest string) *Spec {
		t.Helper()
		s, err := Parse(modelsYAML(rest))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	o := parse(`    models:
      - {alias: chat, targets: [{upstream: openai-a, model: gpt-4o, weight: 95}, {upstream: vllm-b, model: llama, weight: 5}]}
      - {alias: old, targets: [{upstream: vllm-b, model: llama}]}`)
	n := parse(`    max_body_bytes: 4096
    models:
      - {alias: chat, affinity: user, targets: [{upstream: openai-a, model: gpt-4o, weight: 90}, {upstream: vllm-b, model: llama, weight: 10}]}
      - {alias: new, targets: [{upstream: vllm-b, model: llama}]}`)
	d := Diff(o, n).Services[0]
	want := []string{
		"max_body_bytes 1048576->4096",
		`model alias "chat" targets openai-a:gpt-4o 95 / vllm-b:llama 5 -> openai-a:gpt-4o 90 / vllm-b:llama 10`,
		`model alias "chat" affinity ""->"user"`,
		`model alias "new" added (vllm-b:llama 1)`,
		`model alias "old" removed`,
	}
	if d.Change != ChangeModified || strings.Join(d.Details, "\n") != strings.Join(want, "\n") {
		t.Errorf("diff %s:\n%s\nwant\n%s", d.Change, strings.Join(d.Details, "\n"), strings.Join(want, "\n"))
	}
}

// canary_analysis on an alias of two targets is accepted, ttft_p99
// included, with the defaults of a split's; ttft_p99 on a split is
// refused, naming the field.
func TestModelCanaryAnalysis(t *testing.T) {
	t.Parallel()
	s, err := Parse(modelsYAML(`    models:
      - alias: chat
        targets: [{upstream: vllm-b, model: llama, weight: 90}, {upstream: openai-a, model: gpt, weight: 10}]
        canary_analysis: {enabled: true, promote: {metric: ttft_p99, threshold: 0.5}, rollback: {metric: error_rate, threshold: 0.05}}`))
	if err != nil {
		t.Fatalf("alias canary_analysis refused: %v", err)
	}
	d := s.Clone()
	d.Defaults()
	ca := d.Services[0].Models[0].CanaryAnalysis
	if ca.WindowSeconds != DefaultCanaryWindowS || ca.MinRequests != DefaultCanaryMinRequests || ca.Step != DefaultCanaryStep {
		t.Errorf("defaults of an alias's canary_analysis: %+v", ca)
	}
	keys := CanaryKeys(s)
	if _, ok := keys["llm/chat"]; !ok {
		t.Errorf("CanaryKeys = %v, want a key for llm/chat", keys)
	}
	_, err = Parse([]byte(`upstreams:
  - {name: a, endpoints: ["127.0.0.1:1"]}
  - {name: b, endpoints: ["127.0.0.1:2"]}
services:
  - name: web
    split:
      targets: [{upstream: a, weight: 9}, {upstream: b, weight: 1}]
      canary_analysis: {enabled: true, promote: {metric: error_rate, threshold: 0.01}, rollback: {metric: ttft_p99, threshold: 2}}
`))
	checkProblems(t, err, problem{"services[0].split.canary_analysis.rollback.metric", "ttft_p99 (time to the first streamed token) is a metric of a model alias's canary_analysis only", ""})
}
