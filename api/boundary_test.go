package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
)

// serverRequestID is the form of every request id the server mints.
var serverRequestID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestRequestIDFormat checks that every answer, success or problem, carries
// a request id the server minted as 32 lowercase hex digits (the proxy's
// form too), that a problem names the same id, and that ids differ.
func TestRequestIDFormat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	seen := map[string]string{}
	for _, c := range []struct {
		name   string
		call   call
		status int
	}{
		{"healthz", call{method: "GET", path: "/healthz"}, http.StatusOK},
		{"a list", call{method: "GET", path: "/api/v1/generations"}, http.StatusOK},
		{"a publish", call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(95, 5)}}, http.StatusCreated},
		{"not found", call{method: "GET", path: "/api/v1/generations/9"}, http.StatusNotFound},
		{"unsupported type", call{method: "POST", path: "/api/v1/services/api/flip", contentType: "text/plain", body: "x", violates: true}, http.StatusUnsupportedMediaType},
	} {
		r := e.do(c.call).want(t, c.status)
		id := r.header.Get(apiv1.RequestIDHeader)
		if !serverRequestID.MatchString(id) || len(id) != apiv1.RequestIDLen {
			t.Errorf("%s: X-Request-Id %q, want 32 lowercase hex digits", c.name, id)
		}
		if prev, dup := seen[id]; dup {
			t.Errorf("%s: X-Request-Id %q was already the id of %s", c.name, id, prev)
		}
		seen[id] = c.name
		if c.status >= 400 {
			if p := r.problem(t); p.RequestID != id {
				t.Errorf("%s: the problem names request id %q, the header %q", c.name, p.RequestID, id)
			}
		}
	}
	// A client's own well-formed id is echoed, whatever its form.
	r := e.do(call{method: "GET", path: "/healthz", header: map[string]string{apiv1.RequestIDHeader: "Client-ID.1"}}).want(t, http.StatusOK)
	if got := r.header.Get(apiv1.RequestIDHeader); got != "Client-ID.1" {
		t.Errorf("X-Request-Id %q, want the client's echoed", got)
	}
	if a := e.lastAudit(); !serverRequestID.MatchString(a.RequestID) {
		t.Errorf("audit request_id %q, want 32 lowercase hex digits", a.RequestID)
	}
}

// objectKeys returns the keys of the JSON object raw, in the order written.
func objectKeys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %s", raw)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("read key: %v in %s", err, raw)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("read value: %v in %s", err, raw)
		}
	}
	return keys
}

// rawSpec is the spec of a generation answer, each upstream and service as
// written.
type rawSpec struct {
	Upstreams []json.RawMessage `json:"upstreams"`
	Services  []json.RawMessage `json:"services"`
}

// specOrder checks that the spec of the generation answer body lists its
// fields in the schema's order, where jsonb's (shortest key first) differs.
func specOrder(t *testing.T, what string, body []byte) {
	t.Helper()
	var g struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(body, &g); err != nil || len(g.Spec) == 0 {
		t.Fatalf("%s: no spec in %s (%v)", what, body, err)
	}
	if keys := objectKeys(t, g.Spec); !slices.Equal(keys, []string{"upstreams", "services"}) {
		t.Errorf("%s: spec keys %v, want upstreams before services", what, keys)
	}
	var s rawSpec
	if err := json.Unmarshal(g.Spec, &s); err != nil {
		t.Fatal(err)
	}
	if keys := objectKeys(t, s.Upstreams[0]); len(keys) < 3 || !slices.Equal(keys[:3], []string{"name", "balancer", "endpoints"}) {
		t.Errorf("%s: upstream keys %v, want name, balancer, endpoints first", what, keys)
	}
	svc := s.Services[0]
	if keys := objectKeys(t, svc); len(keys) < 2 || !slices.Equal(keys[:2], []string{"name", "base_path"}) {
		t.Errorf("%s: service keys %v, want name, base_path first", what, keys)
	}
	var split struct {
		Split struct {
			Targets []json.RawMessage `json:"targets"`
		} `json:"split"`
	}
	if err := json.Unmarshal(svc, &split); err != nil || len(split.Split.Targets) == 0 {
		t.Fatalf("%s: the first service has no split: %s", what, svc)
	}
	if keys := objectKeys(t, split.Split.Targets[0]); !slices.Equal(keys, []string{"upstream", "weight"}) {
		t.Errorf("%s: target keys %v, want upstream before weight", what, keys)
	}
}

// TestSpecKeyOrder checks every answer that carries a stored spec: the
// fields come in the schema's order, not jsonb's.
func TestSpecKeyOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	create := call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(95, 5)}}
	specOrder(t, "201 of a publish", e.do(create).want(t, http.StatusCreated).body)
	specOrder(t, "200 of an unchanged publish", e.do(create).want(t, http.StatusOK).body)
	specOrder(t, "GET current", e.do(call{method: "GET", path: "/api/v1/generations/current"}).want(t, http.StatusOK).body)
	specOrder(t, "GET by id", e.do(call{method: "GET", path: "/api/v1/generations/1"}).want(t, http.StatusOK).body)
	specOrder(t, "201 of a flip", e.do(call{method: "POST", path: "/api/v1/services/api/flip"}).want(t, http.StatusCreated).body)
	specOrder(t, "201 of a rollback", e.do(call{method: "POST", path: "/api/v1/generations/1/rollback"}).want(t, http.StatusCreated).body)

	// The content is the stored spec's: only the order differs.
	stored, err := e.store.Get(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	got := e.do(call{method: "GET", path: "/api/v1/generations/1"}).want(t, http.StatusOK).generation(t)
	var a, b any
	if err := json.Unmarshal(stored.Spec, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got.Spec, &b); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Errorf("answered spec %s differs from the stored %s", got.Spec, stored.Spec)
	}
}

// TestHealthzVersion checks that /healthz names the build's version when
// the server has one, and leaves it out otherwise.
func TestHealthzVersion(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ version, want string }{
		{"v1.4.0-3-gabc1234-dirty", `{"status":"ok","version":"v1.4.0-3-gabc1234-dirty"}`},
		{"", `{"status":"ok"}`},
	} {
		e := newEnv(t, Options{Version: tt.version})
		r := e.do(call{method: "GET", path: "/healthz"}).want(t, http.StatusOK)
		if got := string(bytes.TrimSpace(r.body)); got != tt.want {
			t.Errorf("version %q: /healthz answered %s, want %s", tt.version, got, tt.want)
		}
	}
}
