package modelreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		body   string
		model  string
		has    bool
		user   string
		stream bool
		err    error
	}{
		{body: `{"model":"chat-prod","messages":[{"role":"user","content":"hi"}]}`, model: "chat-prod", has: true},
		{body: ` { "messages" : [ {"content": "a \"model\": \"x\" } ]"} ], "model" : "m1" , "user":"u-7","stream":true } `, model: "m1", has: true, user: "u-7", stream: true},
		{body: `{"mo\u0064el":"e\u0073caped","stream":false}`, model: "escaped", has: true},
		{body: `{"input":"x","nested":{"model":"not me"}}`},
		{body: `{}`},
		{body: `{"stream":"true","model":"m"}`, model: "m", has: true},
		{body: `[{"model":"m"}]`, err: ErrNotObject},
		{body: `{"model":"m"} {}`, err: ErrNotObject},
		{body: `{"model":"m",}`, err: ErrNotObject},
		{body: `"model"`, err: ErrNotObject},
		{body: ``, err: ErrNotObject},
		{body: `{"model":"a","model":"b"}`, err: ErrDuplicate},
		{body: `{"model":"a","mod\u0065l":"b"}`, err: ErrDuplicate},
		{body: `{"user":"a","user":"b","model":"m"}`, err: ErrDuplicate},
		{body: `{"model":7}`, err: ErrNotString},
		{body: `{"user":null}`, err: ErrNotString},
	} {
		f, err := Scan([]byte(tt.body))
		if !errors.Is(err, tt.err) {
			t.Errorf("Scan(%s): error %v, want %v", tt.body, err, tt.err)
			continue
		}
		if err == nil && (f.Model != tt.model || f.HasModel != tt.has || f.User != tt.user || f.Stream != tt.stream) {
			t.Errorf("Scan(%s) = %+v", tt.body, f)
		}
	}
}

// Rewrite changes the model's value and nothing else: the bytes before and
// after it are the body's own.
func TestRewrite(t *testing.T) {
	t.Parallel()
	body := []byte(`{"temperature": 0.70, "model" : "chat-prod",  "messages":[{"role":"user","content":"caf\u00e9"}], "n":1e2}`)
	f, err := Scan(body)
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]string{
		"gpt-4o":               `{"temperature": 0.70, "model" : "gpt-4o",  "messages":[{"role":"user","content":"caf\u00e9"}], "n":1e2}`,
		`odd"name\with` + "\n": `{"temperature": 0.70, "model" : "odd\"name\\with\u000a",  "messages":[{"role":"user","content":"caf\u00e9"}], "n":1e2}`,
	} {
		got := Rewrite(nil, body, f, model)
		if string(got) != want {
			t.Errorf("Rewrite(%q):\n got %s\nwant %s", model, got, want)
		}
		g, err := Scan(got)
		if err != nil || g.Model != model {
			t.Errorf("Scan of the rewrite: %+v, %v", g, err)
		}
	}
}

// FuzzScan: on every input Scan agrees with encoding/json: it accepts
// exactly the JSON objects (without duplicate routing fields) and finds
// the model a full decode finds; a rewrite decodes to the same object with
// only the model changed.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{"model":"a","user":"u","stream":true,"messages":[{"x":"]}"}]}`, `{"a":{"model":"n"}}`, `[]`, `{"model":"\u0041"}`, `{"model":"a","model":"b"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fields, err := Scan(body)
		var m map[string]json.RawMessage
		decodeErr := json.Unmarshal(body, &m)
		if decodeErr != nil || m == nil {
			if err == nil {
				t.Fatalf("Scan accepted %q, which is not a JSON object (%v)", body, decodeErr)
			}
			return
		}
		if errors.Is(err, ErrDuplicate) {
			return // encoding/json keeps the last; Scan refuses
		}
		raw, has := m["model"]
		var model string
		if has && json.Unmarshal(raw, &model) != nil {
			if !errors.Is(err, ErrNotString) {
				t.Fatalf("model %s is not a string; Scan: %v", raw, err)
			}
			return
		}
		if err != nil {
			if errors.Is(err, ErrNotString) {
				return // "user" is not a string
			}
			t.Fatalf("Scan refused the object %q: %v", body, err)
		}
		if fields.HasModel != has || fields.Model != model {
			t.Fatalf("Scan(%q) model %q (%v), a decode %q (%v)", body, fields.Model, fields.HasModel, model, has)
		}
		if view, err := ScanView(body); err != nil || view != fields {
			t.Fatalf("ScanView(%q) = %+v, %v; Scan %+v", body, view, err, fields)
		}
		if !has {
			return
		}
		out := Rewrite(nil, body, fields, "other-model")
		var m2 map[string]json.RawMessage
		if err := json.Unmarshal(out, &m2); err != nil {
			t.Fatalf("the rewrite of %q is not JSON: %q", body, out)
		}
		if string(m2["model"]) != `"other-model"` || len(m2) != len(m) {
			t.Fatalf("the rewrite of %q: %q", body, out)
		}
		if !bytes.Equal(out[:fields.ModelStart], body[:fields.ModelStart]) || !bytes.HasSuffix(out, body[fields.ModelEnd:]) {
			t.Fatalf("the rewrite of %q changed other bytes: %q", body, out)
		}
	})
}

// body2k is a chat completion request of about 2 KiB, its model last.
var body2k = func() []byte {
	var b strings.Builder
	b.WriteString(`{"messages":[`)
	for i := range 12 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":"Tell me about the weather in a city with a \"quoted\" name and some text to make it long enough."}`)
	}
	b.WriteString(`],"temperature":0.2,"user":"conversation-42","stream":true,"model":"chat-prod"}`)
	return []byte(b.String())
}()

func BenchmarkScan2K(b *testing.B) {
	b.SetBytes(int64(len(body2k)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Scan(body2k); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanRewrite2K(b *testing.B) {
	b.SetBytes(int64(len(body2k)))
	b.ReportAllocs()
	buf := make([]byte, 0, 4096)
	for b.Loop() {
		f, err := Scan(body2k)
		if err != nil {
			b.Fatal(err)
		}
		buf = Rewrite(buf[:0], body2k, f, "gpt-4o")
	}
}

// BenchmarkDecode2K is the full decode Scan stands in for: the body into a
// map, to find the fields and re-encode it with another model.
func BenchmarkDecode2K(b *testing.B) {
	b.SetBytes(int64(len(body2k)))
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(body2k, &m); err != nil {
			b.Fatal(err)
		}
		m["model"] = "gpt-4o"
		if _, err := json.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

// ScanView finds what Scan finds, and allocates nothing for fields
// without escapes.
func TestScanView(t *testing.T) {
	body := []byte(`{"model":"chat-prod","user":"u-1","stream":true,"messages":[{"role":"user","content":"a \\\" \\\\"}]}`)
	want, err := Scan(body)
	if err != nil {
		t.Fatal(err)
	}
	var got Fields
	if allocs := testing.AllocsPerRun(100, func() { got, _ = ScanView(body) }); allocs != 0 && !raceEnabled {
		t.Errorf("ScanView allocates %.0f times", allocs)
	}
	if got != want || got.Model != "chat-prod" || got.User != "u-1" || !got.Stream {
		t.Errorf("ScanView = %+v, Scan = %+v", got, want)
	}
}
