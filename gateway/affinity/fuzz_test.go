package affinity

import (
	"net/http"
	"testing"
)

func FuzzReadCookie(f *testing.F) {
	for _, s := range []string{"sid=abc", "a=1; sid=\"q\"", ";;=;", "sid", "sid=; sid=x", "\x00sid=\xff"} {
		f.Add(s, "sid")
	}
	f.Fuzz(func(t *testing.T, line, name string) {
		h := http.Header{"Cookie": {line, line}}
		v, ok := ReadCookie(h, name)
		if !ok && v != "" {
			t.Fatalf("not found but value %q", v)
		}
		if ok && len(v) > len(line) {
			t.Fatalf("value %q longer than the header", v)
		}
	})
}
