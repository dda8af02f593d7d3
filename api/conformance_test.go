package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/openapi"
)

func init() {
	// kin-openapi knows application/yaml and application/x-yaml; the API
	// also accepts text/yaml.
	openapi3filter.RegisterBodyDecoder("text/yaml", openapi3filter.YamlBodyDecoder)
}

// loadDoc parses and validates openapi.yaml once per test binary.
var loadDoc = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Spec)
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validate openapi.yaml: %w", err)
	}
	// Match requests whatever host the test server has.
	doc.Servers = nil
	return doc, nil
})

// specRouter is a kin-openapi router over openapi.yaml.
var specRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := loadDoc()
	if err != nil {
		return nil, err
	}
	return gorillamux.NewRouter(doc)
})

// mayViolateKey marks a request that deliberately breaks openapi.yaml (a
// missing body, a bad parameter, a wrong media type) to test the refusal.
type mayViolateKey struct{}

// mayViolate marks req as allowed to break openapi.yaml; its response must
// still conform.
func mayViolate(req *http.Request) *http.Request {
	return req.WithContext(context.WithValue(req.Context(), mayViolateKey{}, true))
}

// conformance is an http.RoundTripper that fails the test when a request or
// its response does not conform to openapi.yaml: the route must exist, the
// parameters and body must validate (unless the request is marked with
// mayViolate), and the response's status must be documented for the
// operation, with its documented headers and a body that matches the
// schema. Event streams are checked up to their headers.
type conformance struct {
	t      testing.TB
	router routers.Router
	next   http.RoundTripper
}

func (c *conformance) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	what := req.Method + " " + req.URL.RequestURI()
	violationOK, _ := req.Context().Value(mayViolateKey{}).(bool)

	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := c.router.FindRoute(vreq)
	if err != nil {
		c.t.Errorf("conformance: %s is not in openapi.yaml: %v", what, err)
		return c.next.RoundTrip(req)
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    vreq,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc,
			SkipSettingDefaults: true,
			MultiError:          true,
		},
	}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil && !violationOK {
		c.t.Errorf("conformance: request %s does not conform to openapi.yaml: %v", what, err)
	}

	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                opts,
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		opts.ExcludeResponseBody = true // a stream: leave the body to the test
		if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
			c.t.Errorf("conformance: response to %s does not conform to openapi.yaml: %v", what, err)
		}
		return resp, nil
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	out.SetBodyBytes(data)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		c.t.Errorf("conformance: response %d to %s does not conform to openapi.yaml: %v\nbody: %.2000s", resp.StatusCode, what, err, data)
	}
	return resp, nil
}

// TestOpenAPIRoutes proves that the chi route table and openapi.yaml list
// exactly the same operations.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	doc, err := loadDoc()
	if err != nil {
		t.Fatal(err)
	}
	var spec []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			spec = append(spec, method+" "+path)
		}
	}
	s := New(Options{Store: &db.Store{}})
	var router []string
	err = chi.Walk(s.routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		router = append(router, method+" "+strings.TrimSuffix(route, "/*"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(spec)
	slices.Sort(router)
	for _, r := range router {
		if !slices.Contains(spec, r) {
			t.Errorf("route %s is not in openapi.yaml", r)
		}
	}
	for _, o := range spec {
		if !slices.Contains(router, o) {
			t.Errorf("openapi.yaml operation %s has no route", o)
		}
	}
	if len(router) < 18 {
		t.Errorf("walked only %d routes: %v", len(router), router)
	}
}

// TestOpenAPIErrorResponses checks that every /api/ operation documents its
// Host, auth, internal-error and database-unavailable answers as
// problem+json, every mutation its cross-site, media-type and rate-limit
// answers too, and every operation but the probes its Host answer.
func TestOpenAPIErrorResponses(t *testing.T) {
	t.Parallel()
	doc, err := loadDoc()
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range doc.Paths.Map() {
		if path == "/healthz" || path == "/readyz" {
			continue
		}
		if !strings.HasPrefix(path, "/api/") {
			for method, op := range item.Operations() {
				if resp := op.Responses.Value("421"); resp == nil || resp.Value.Content.Get("application/problem+json") == nil {
					t.Errorf("%s %s does not document a problem+json 421", method, path)
				}
			}
			continue
		}
		for method, op := range item.Operations() {
			codes := []string{"401", "421", "500", "503"}
			if method != http.MethodGet {
				codes = append(codes, "403", "415", "429")
			}
			for _, code := range codes {
				resp := op.Responses.Value(code)
				if resp == nil || resp.Value.Content.Get("application/problem+json") == nil {
					t.Errorf("%s %s does not document a problem+json %s", method, path, code)
				}
			}
		}
	}
}
