package config

import (
	"strings"
	"testing"
)

// brakeExample is testdata/example.json with extra added to its
// canary_analysis.
func brakeExample(t *testing.T, extra string) string {
	t.Helper()
	in := string(readFile(t, "testdata/example.json"))
	if !strings.Contains(in, `"enabled": true`) {
		t.Fatal(`example has no "enabled": true`)
	}
	return strings.Replace(in, `"enabled": true`, `"enabled": true`+extra, 1)
}

func TestLocalBrakeDecodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		field     string
		wantAfter int
		wantOn    bool
	}{
		{name: "absent: on after 10 s", field: "", wantAfter: DefaultLocalBrakeAfterS, wantOn: true},
		{name: "after 30", field: `, "local_brake": {"after_seconds": 30}`, wantAfter: 30, wantOn: true},
		{name: "enabled alone", field: `, "local_brake": {"enabled": true}`, wantAfter: DefaultLocalBrakeAfterS, wantOn: true},
		{name: "off", field: `, "local_brake": {"enabled": false}`, wantOn: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse([]byte(brakeExample(t, tc.field)))
			if err != nil {
				t.Fatal(err)
			}
			after, on := s.Services[0].Split.CanaryAnalysis.Brake()
			if after != tc.wantAfter || on != tc.wantOn {
				t.Errorf("Brake() = %d, %v; want %d, %v", after, on, tc.wantAfter, tc.wantOn)
			}
			c := s.Clone()
			if lb := s.Services[0].Split.CanaryAnalysis.LocalBrake; lb != nil && c.Services[0].Split.CanaryAnalysis.LocalBrake == lb {
				t.Error("Clone shares local_brake")
			}
		})
	}
}

func TestLocalBrakeRefused(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(brakeExample(t, `, "local_brake": {"after": 5}`)))
	checkProblems(t, err, problem{"services[0].split.canary_analysis.local_brake.after", "unknown field", ""})
	_, err = Parse([]byte(brakeExample(t, `, "local_brake": {"after_seconds": 0}`)))
	checkProblems(t, err, problem{"services[0].split.canary_analysis.local_brake.after_seconds", "must be 1..3600", ""})
}

// The default brake spelled out is the same canary as the brake left out:
// a publish that writes it keeps the canary's state.
func TestLocalBrakeDefaultKeepsTheCanary(t *testing.T) {
	t.Parallel()
	a, err := Parse([]byte(brakeExample(t, "")))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse([]byte(brakeExample(t, `, "local_brake": {"after_seconds": 10}`)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte(brakeExample(t, `, "local_brake": {"enabled": false}`)))
	if err != nil {
		t.Fatal(err)
	}
	if got := CanaryReset(a, b); len(got) != 0 {
		t.Errorf("CanaryReset(absent, after 10) = %v, want none", got)
	}
	if got := CanaryReset(a, c); len(got) != 1 {
		t.Errorf("CanaryReset(absent, off) = %v, want the group", got)
	}
}
