package fastfront

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestFastTargetAndRoutePath: the fasthttp front forwards the target as it
// came (in origin form) and routes on its path as url.ParseRequestURI
// gives it on the net/http front: percent-decoded, dot segments, repeated
// slashes and "#" kept (route refuses the dot segments), a bad escape or a
// target that is no path refused.
func TestFastTargetAndRoutePath(t *testing.T) {
	for _, c := range []struct {
		target, forwarded, path string
		ok                      bool
	}{
		{"/v1/users?q=%zz", "/v1/users?q=%zz", "/v1/users", true},
		{"/v1/%2e%2e/admin", "/v1/%2e%2e/admin", "/v1/../admin", true},
		{"/v1%2f..%2fadmin", "/v1%2f..%2fadmin", "/v1/../admin", true},
		{"//v1//x", "//v1//x", "//v1//x", true},
		{"/v1#/../", "/v1#/../", "/v1#/../", true},
		{"/%C3%BCn%C3%AF/x", "/%C3%BCn%C3%AF/x", "/ünï/x", true},
		{"OPTIONS *", "*", "*", true},
		{"http://a.example/x/../y?q=1", "/x/../y?q=1", "/x/../y", true},
		{"HTTP://A.EXAMPLE:80?q=1", "/?q=1", "/", true},
		{"http://a.example", "/", "/", true},
		{"/v1/%zz", "/v1/%zz", "", false},
		{"/%", "/%", "", false},
		{"/v1/%4", "/v1/%4", "", false},
	} {
		var h fasthttp.RequestHeader
		line := c.target
		if !strings.Contains(line, " ") {
			line = "GET " + line
		}
		if err := h.Read(bufio.NewReader(strings.NewReader(line + " HTTP/1.1\r\nHost: x\r\n\r\n"))); err != nil {
			t.Fatalf("%q: %v", c.target, err)
		}
		fwd := fastTarget(&h)
		path, ok := fastRoutePath(fwd)
		if string(fwd) != c.forwarded || path != c.path || ok != c.ok {
			t.Errorf("%q: forwarded %q, path %q, %v; want %q, %q, %v", c.target, fwd, path, ok, c.forwarded, c.path, c.ok)
		}
	}
}
