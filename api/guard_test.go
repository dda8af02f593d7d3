package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// A web page of any site can make a browser POST a form (urlencoded,
// multipart or text/plain, an empty body included) to the API without
// asking first. No such request may change anything, with a token or
// without, and each refusal is audited.
func TestCrossSiteMutationsRefused(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name  string
		token string
	}{{"no token", ""}, {"admin token", "s3cret"}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Options{Token: mode.token})
			auth := map[string]string{}
			if mode.token != "" {
				auth["Authorization"] = "Bearer " + mode.token
			}
			e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(90, 10)}, header: auth}).
				want(t, http.StatusCreated)
			flip := "/api/v1/services/api/flip"
			own := e.url // http://127.0.0.1:port, the listener's own origin
			tests := []struct {
				name   string
				call   call
				status int
				says   string // in the problem's detail or errors
			}{
				{"form, empty body", call{contentType: "application/x-www-form-urlencoded"}, 415, `"application/x-www-form-urlencoded"`},
				{"form with a body", call{body: "message=pwned", contentType: "application/x-www-form-urlencoded"}, 415, "application/json"},
				{"multipart", call{body: "--x--", contentType: "multipart/form-data; boundary=x"}, 415, "multipart/form-data"},
				{"text/plain", call{body: `{"message":"pwned"}`, contentType: "text/plain"}, 415, `"text/plain"`},
				{"no Content-Type, empty body", call{noContentType: true}, 415, "no Content-Type"},
				{"cross-site", call{header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403, "cross-site"},
				{"same-site", call{header: map[string]string{"Sec-Fetch-Site": "same-site"}}, 403, "same-site"},
				{"foreign Origin", call{header: map[string]string{"Origin": "http://evil.example"}}, 403, "evil.example"},
				{"Origin of another port", call{header: map[string]string{"Origin": "http://127.0.0.1:1"}}, 403, "127.0.0.1:1"},
				{"null Origin", call{header: map[string]string{"Origin": "null"}}, 403, "null"},
				{"own Origin", call{header: map[string]string{"Origin": own, "Sec-Fetch-Site": "same-origin"}}, 201, ""},
				{"typed by the user", call{header: map[string]string{"Sec-Fetch-Site": "none"}}, 201, ""},
				{"+json type", call{body: `{}`, contentType: "application/merge-patch+json"}, 415, "application/json"},
			}
			for _, tt := range tests {
				c := tt.call
				c.method, c.path, c.violates = "POST", flip, true
				c.header = mergeHeader(mergeHeader(c.header, "X-Request-Id", "guard-"+strings.ReplaceAll(tt.name, " ", "-")), "Authorization", auth["Authorization"])
				if mode.token == "" {
					delete(c.header, "Authorization")
				}
				r := e.do(c)
				if r.status != tt.status {
					t.Errorf("%s: status %d, want %d; body %s", tt.name, r.status, tt.status, r.body)
					continue
				}
				if tt.status >= 400 {
					p := r.problem(t)
					if text := p.Detail + " " + fieldText(p); !strings.Contains(text, tt.says) {
						t.Errorf("%s: problem %q does not say %q", tt.name, text, tt.says)
					}
				}
			}
			// Only the two allowed calls flipped: generation 1, then 2 and 3.
			if n := e.generationCount(); n != 3 {
				t.Errorf("%d generations, want 3 (two accepted flips)", n)
			}
			refused := 0
			for _, a := range e.auditWith(auth) {
				if a.Outcome == apiv1.OutcomeRefused && a.Action == apiv1.ActionFlip && (a.Status == 403 || a.Status == 415) {
					refused += a.Count
				}
			}
			if want := len(tests) - 2; refused != want {
				t.Errorf("%d refusals audited, want %d", refused, want)
			}
		})
	}
}

// fieldText joins a problem's field errors.
func fieldText(p apiv1.Problem) string {
	var parts []string
	for _, e := range p.Errors {
		parts = append(parts, e.String())
	}
	return strings.Join(parts, "; ")
}

// auditWith returns the newest audit entries, read with header (a token).
func (e *env) auditWith(header map[string]string) []apiv1.AuditEntry {
	e.t.Helper()
	var page apiv1.AuditList
	e.do(call{method: "GET", path: "/api/v1/audit?limit=500", header: header}).want(e.t, http.StatusOK).decode(e.t, &page)
	return page.Items
}

// DNS rebinding: a page of evil.example whose name now resolves to
// 127.0.0.1 is same-origin with the API, but its requests say Host:
// evil.example. The API answers only its own names.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{AllowedHosts: []string{"api.example.com", "lb.example:8443", "[fd00::1]:9090"}})
	e.publish(specWith(90, 10), "")
	tests := []struct {
		host   string
		method string
		path   string
		status int
	}{
		{"evil.example:9090", "GET", "/api/v1/generations", 421},
		{"evil.example", "GET", "/api/v1/generations/current", 421},
		{"evil.example:9090", "GET", "/api/v1/events", 421},
		{"evil.example:9090", "GET", "/openapi.yaml", 421},
		{"evil.example:9090", "GET", "/docs", 421},
		{"evil.example:9090", "GET", "/metrics", 421},
		{"evil.example:9090", "POST", "/api/v1/services/api/flip", 421},
		{"127.0.0.1.evil.example", "GET", "/api/v1/generations", 421},
		{"localhost.evil.example:9090", "GET", "/api/v1/generations", 421},
		{"lb.example:9090", "GET", "/api/v1/generations", 421},
		{"fd00::1", "GET", "/api/v1/generations", 421}, // the rule names port 9090
		{"evil.example:9090", "GET", "/healthz", 200},
		{"evil.example:9090", "GET", "/readyz", 200},
		{"localhost:9090", "GET", "/api/v1/generations", 200},
		{"LOCALHOST", "GET", "/api/v1/generations", 200},
		{"127.0.0.2:1234", "GET", "/api/v1/generations", 200},
		{"[::1]:80", "GET", "/api/v1/generations", 200},
		{"api.example.com", "GET", "/api/v1/generations", 200},
		{"API.example.com.:9090", "GET", "/api/v1/generations", 200},
		{"lb.example:8443", "GET", "/api/v1/generations", 200},
		{"[fd00::1]:9090", "GET", "/api/v1/generations", 200},
		{"api.example.com", "POST", "/api/v1/services/api/flip", 201},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.host+" "+tt.path, func(t *testing.T) {
			r := e.in(t).do(call{method: tt.method, path: tt.path, header: map[string]string{"Host": tt.host}, violates: true})
			if r.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tt.status, r.body)
			}
			if tt.status == http.StatusMisdirectedRequest {
				p := r.problem(t)
				if !strings.Contains(p.Detail, "--admin-host") || !strings.Contains(p.Detail, "api.example.com") {
					t.Errorf("problem %q does not say how to add a name", p.Detail)
				}
			}
		})
	}
	// An unknown path is no way around it (a request outside openapi.yaml,
	// so without the conformance check).
	req, err := http.NewRequestWithContext(t.Context(), "GET", e.url+"/no/such/path", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "evil.example:9090"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("unknown path with a foreign Host: status %d, want 421", resp.StatusCode)
	}

	// The refused mutation is audited, as 421.
	var found bool
	for _, a := range e.audit() {
		if a.Action == apiv1.ActionFlip && a.Status == http.StatusMisdirectedRequest && a.Outcome == apiv1.OutcomeRefused {
			found = strings.Contains(string(a.Detail), "evil.example:9090")
		}
	}
	if !found {
		t.Errorf("the misdirected flip is not audited: %+v", e.audit())
	}
}

// A mutating call from a page of an allowed host (a dashboard behind a load
// balancer) passes the Origin check.
func TestOriginOfAllowedHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{AllowedHosts: []string{"admin.example"}})
	e.publish(specWith(90, 10), "")
	for origin, status := range map[string]int{
		"https://admin.example":       http.StatusCreated,
		"https://admin.example:8443":  http.StatusCreated,
		"https://admin.example/path":  http.StatusForbidden,
		"https://user@admin.example":  http.StatusForbidden,
		"https://other.example":       http.StatusForbidden,
		"ftp://admin.example":         http.StatusForbidden,
		"https://admin.example.evil":  http.StatusForbidden,
		"http://admin.example:notnum": http.StatusForbidden,
	} {
		r := e.do(call{method: "POST", path: "/api/v1/services/api/flip", header: map[string]string{"Origin": origin}})
		if r.status != status {
			t.Errorf("Origin %s: status %d, want %d; body %s", origin, r.status, status, r.body)
		}
	}
}

func TestCheckAllowedHost(t *testing.T) {
	t.Parallel()
	for entry, ok := range map[string]bool{
		"api.example.com":      true,
		"api.example.com:9090": true,
		"API.Example.com.":     true,
		"10.0.0.5":             true,
		"10.0.0.5:9090":        true,
		"[fd00::1]:9090":       true,
		"fd00::1":              true,
		"[fd00::1]":            true,
		"host_name":            true,
		"":                     false,
		"http://api.example":   false,
		"api.example/path":     false,
		"*.example.com":        false,
		"api example":          false,
		"api.example:0":        false,
		"api.example:65536":    false,
		"api.example:http":     false,
		"[not-an-ip]:80":       false,
		"user@api.example":     false,
		"ap\u00efi.example":    false,
	} {
		err := CheckAllowedHost(entry)
		if (err == nil) != ok {
			t.Errorf("CheckAllowedHost(%q) = %v, want ok %t", entry, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "want a host name") {
			t.Errorf("CheckAllowedHost(%q) = %v: does not say what is allowed", entry, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("New with an invalid allowed host did not panic")
		}
	}()
	New(Options{Store: &db.Store{}, AllowedHosts: []string{"http://x"}})
}
