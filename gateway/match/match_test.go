package match

import (
	"strings"
	"testing"

	"github.com/dwara/dwara/gateway/config"
)

// fakeRequest is a request of header lines and cookies.
type fakeRequest struct {
	headers map[string]string // lower-case names
	cookies map[string]string
}

func (f *fakeRequest) Header(name string) (string, bool) { v, ok := f.headers[name]; return v, ok }
func (f *fakeRequest) Cookie(name string) (string, bool) { v, ok := f.cookies[name]; return v, ok }

func split(t testing.TB) *config.Split {
	t.Helper()
	spec, err := config.Parse([]byte(`upstreams:
  - {name: stable, endpoints: ["127.0.0.1:9001"]}
  - {name: canary, endpoints: ["127.0.0.1:9101"]}
  - {name: beta, endpoints: ["127.0.0.1:9201"]}
services:
  - name: api
    split:
      targets: [{upstream: stable, weight: 90}, {upstream: canary, weight: 10}, {upstream: beta, weight: 0}]
      match:
        - {name: testers, headers: {X-User-Group: {exact: beta}}, target: beta}
        - {name: pro-eu, headers: {X-Region: {prefix: eu-}}, cookies: {plan: {regex: "^pro"}}, target: canary}
        - {name: mobile, headers: {User-Agent: {regex: "(?i)mobile"}}, target: stable}
`))
	if err != nil {
		t.Fatal(err)
	}
	return spec.Services[0].Split
}

func TestMatch(t *testing.T) {
	t.Parallel()
	rs, err := Compile(split(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		req    fakeRequest
		rule   string
		target int
	}{
		{"exact", fakeRequest{headers: map[string]string{"x-user-group": "beta"}}, "testers", 2},
		{"exact is whole", fakeRequest{headers: map[string]string{"x-user-group": "betamax"}}, "", -1},
		{"all conditions", fakeRequest{headers: map[string]string{"x-region": "eu-west"}, cookies: map[string]string{"plan": "pro-annual"}}, "pro-eu", 1},
		{"one condition short", fakeRequest{headers: map[string]string{"x-region": "eu-west"}, cookies: map[string]string{"plan": "free"}}, "", -1},
		{"absent cookie", fakeRequest{headers: map[string]string{"x-region": "eu-west"}}, "", -1},
		{"first wins", fakeRequest{headers: map[string]string{"x-user-group": "beta", "user-agent": "Mobile Safari"}}, "testers", 2},
		{"regex unanchored", fakeRequest{headers: map[string]string{"user-agent": "Foo MOBILE/1"}}, "mobile", 0},
		{"none", fakeRequest{}, "", -1},
	} {
		i := rs.Match(&tt.req)
		name, target := "", -1
		if i >= 0 {
			name, target = rs.Rule(i)
		}
		if name != tt.rule || target != tt.target {
			t.Errorf("%s: rule %q target %d, want %q %d", tt.name, name, target, tt.rule, tt.target)
		}
	}
	var none *Rules
	if none.Match(&fakeRequest{}) != -1 || none.Len() != 0 {
		t.Error("nil Rules matched")
	}
	if rs, err := Compile(&config.Split{}); rs != nil || err != nil {
		t.Errorf("Compile of a split without rules = %v, %v; want nil", rs, err)
	}
}

// Checking three rules allocates nothing.
func TestMatchAllocs(t *testing.T) {
	rs, err := Compile(split(t))
	if err != nil {
		t.Fatal(err)
	}
	req := &fakeRequest{headers: map[string]string{"user-agent": strings.Repeat("x", 40) + " mobile"}, cookies: map[string]string{"plan": "free"}}
	if n := testing.AllocsPerRun(1000, func() { rs.Match(req) }); n != 0 {
		t.Errorf("Match allocates %v times a check", n)
	}
}

func BenchmarkMatchThreeRules(b *testing.B) {
	rs, err := Compile(split(b))
	if err != nil {
		b.Fatal(err)
	}
	req := &fakeRequest{headers: map[string]string{"user-agent": "Mozilla/5.0 (iPhone) Mobile/15E148", "x-region": "us-east"}, cookies: map[string]string{"plan": "free"}}
	b.ReportAllocs()
	for b.Loop() {
		if rs.Match(req) != 2 {
			b.Fatal("no match")
		}
	}
}
