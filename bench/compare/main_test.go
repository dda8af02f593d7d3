package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseKnobs(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	k, err := parseKnobs(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if k.Rounds != 5 || k.Duration != 10*time.Second || k.Connections != 64 || k.Threads != 2 || k.CanaryPercent != 5 ||
		k.DwaraBin != "bin/dwara" || !slices.Equal(k.Contestants, contestantNames(false)) || k.ResultsTSV == "" || k.Deadline < 10*time.Minute {
		t.Errorf("defaults = %+v", k)
	}

	k, err = parseKnobs([]string{"-rounds", "2"}, env(map[string]string{
		"ROUNDS": "3", "DURATION": "4", "CONNECTIONS": "32", "CANARY_PERCENT": "10",
		"DWARA_BIN": "/x/dwara", "CONTESTANTS": "dwara, nginx", "SEED": "7", "RESULTS_TSV": "/r.tsv", "WARMUP": "0",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if k.Rounds != 2 {
		t.Errorf("flag -rounds 2 under ROUNDS=3: got %d", k.Rounds)
	}
	if k.Duration != 4*time.Second || k.Warmup != 0 || k.Connections != 32 || k.CanaryPercent != 10 || k.DwaraBin != "/x/dwara" ||
		k.Seed != 7 || k.ResultsTSV != "/r.tsv" || !slices.Equal(k.Contestants, []string{"nginx", "dwara"}) {
		t.Errorf("from the environment: %+v", k)
	}

	bad := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unknown contestant", map[string]string{"CONTESTANTS": "nginx,envoy"}, nil, `unknown contestant "envoy"`},
		{"bad env value", map[string]string{"ROUNDS": "many"}, nil, `ROUNDS="many"`},
		{"fractional seconds", nil, []string{"-duration", "1.5s"}, "whole number of seconds"},
		{"percent out of range", map[string]string{"CANARY_PERCENT": "100"}, nil, "CANARY_PERCENT must be 1..99"},
		{"zero rounds", nil, []string{"-rounds", "0"}, "ROUNDS must be 1..100"},
		{"extra argument", nil, []string{"now"}, "unexpected arguments"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseKnobs(tt.args, env(tt.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
