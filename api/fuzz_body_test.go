package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
)

// FuzzDecodeBody fuzzes the API's request body decoding with arbitrary
// bodies and Content-Types: the publish body (readEnvelope: JSON or YAML
// by Content-Type, through gateway/config.ParseEnvelope), the optional
// {"message"} body and the required weights body (readJSON, decodeJSON),
// each behind the same 1 MiB cap as the router's. Nothing may panic; every
// error must be a *apiv1.Problem with a 4xx status, written as that status
// with an application/problem+json body that says the same status; and a
// publish body that decodes must carry a spec that validates.
func FuzzDecodeBody(f *testing.F) {
	spec := `{"upstreams":[{"name":"a","endpoints":["127.0.0.1:9001"]},{"name":"b","endpoints":["127.0.0.1:9101"]}],` +
		`"services":[{"name":"web","base_path":"/","split":{"targets":[{"upstream":"a","weight":90},{"upstream":"b","weight":10}]}}]}`
	for _, s := range []struct {
		body, ctype string
		kind        uint8
	}{
		{`{"message":"m","spec":` + spec + `}`, "application/json", 0},
		{`{"message":"m","spec":` + spec + `}`, "application/json; charset=utf-8", 0},
		{"message: m\nspec:\n  upstreams: [{name: a, endpoints: ['127.0.0.1:1']}]\n  services: [{name: s, upstream: a}]\n", "application/yaml", 0},
		{"spec: {}\nspec: {}\n", "text/yaml", 0},
		{"a: &a [*a, *a, *a]\nb: [*a, *a, *a, *a]\n", "application/x-yaml", 0},
		{"message: m\n---\nspec: {}\n", "application/yaml", 0},
		{`{"message":"m","spec":` + spec + `}{}`, "application/json", 0},
		{`{"message":"\u0000","spec":` + spec + `}`, "application/json", 0},
		{"{\"message\":\"\xff\",\"spec\":{}}", "application/json", 0},
		{"\xef\xbb\xbf{\"spec\":{}}", "application/json", 0},
		{`{"message":"m","message":"n","spec":{}}`, "application/json", 0},
		{`{"spec":[]}`, "application/json", 0},
		{`[`, "application/json", 0},
		{``, "application/json", 0},
		{`{"spec":{}}`, "text/plain", 0},
		{`{"spec":{}}`, "application/json;;", 0},
		{`{"message":"flip"}`, "application/json", 1},
		{`{"message":1}`, "application/json", 1},
		{`{"message":"a","extra":true}`, "application/json", 1},
		{`{"message":"a"} x`, "application/json", 1},
		{``, "", 1},
		{`{"weights":{"a":80,"b":20},"allow_reshuffle":true}`, "application/json", 2},
		{`{"weights":{"a":1e400}}`, "application/json", 2},
		{`{"weights":{"a":-1,"a":2}}`, "application/json", 2},
		{`{"weights":null}`, "application/json", 2},
		{strings.Repeat("[", 20000), "application/json", 2},
		{strings.Repeat(" ", apiv1.MaxBodyBytes) + "{}", "application/json", 1},
	} {
		f.Add([]byte(s.body), s.ctype, s.kind)
	}
	// A store that never connects: the decoding under test touches no
	// database; New needs one.
	store, err := db.Open(context.Background(), "postgres://fuzz@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(store.Close)
	s := New(Options{Store: store, Logger: slog.New(slog.DiscardHandler)})

	f.Fuzz(func(t *testing.T, body []byte, ctype string, kind uint8) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/api/v1/generations", bytes.NewReader(body))
		r.Header.Set("Content-Type", ctype)
		r.Body = http.MaxBytesReader(rec, r.Body, apiv1.MaxBodyBytes)

		var err error
		switch kind % 3 {
		case 0:
			var env config.Envelope
			env, err = readEnvelope(r)
			if err == nil {
				if env.Spec == nil {
					t.Fatalf("readEnvelope accepted %q without a spec", body)
				}
				if verr := env.Spec.Validate(); verr != nil {
					t.Fatalf("readEnvelope accepted a spec that does not validate: %v", verr)
				}
				err = checkMessage(env.Message)
			}
		case 1:
			var req apiv1.MessageRequest
			if err = readJSON(r, &req, true); err == nil {
				err = checkMessage(req.Message)
			}
		case 2:
			var req apiv1.WeightsRequest
			err = readJSON(r, &req, false)
		}
		if err == nil {
			return
		}

		p, ok := errors.AsType[*apiv1.Problem](err)
		if !ok {
			t.Fatalf("kind %d, Content-Type %q, body %q: error %v (%T) is not a Problem: it would be answered 500", kind%3, ctype, body, err, err)
		}
		if p.Status < 400 || p.Status > 499 {
			t.Fatalf("kind %d, Content-Type %q, body %q: Problem with status %d, want 4xx: %+v", kind%3, ctype, body, p.Status, p)
		}
		s.writeError(rec, r, err)
		if rec.Code != p.Status {
			t.Fatalf("the Problem of status %d was written as %d", p.Status, rec.Code)
		}
		if ct := rec.Header().Get("Content-Type"); ct != contentProblem {
			t.Fatalf("the Problem was written as Content-Type %q, want %s", ct, contentProblem)
		}
		var written apiv1.Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &written); err != nil || written.Status != p.Status {
			t.Fatalf("the written Problem %q does not decode to status %d: %v", rec.Body.Bytes(), p.Status, err)
		}
	})
}
