package openapi_test

import (
	"net/url"
	"testing"
)

// TestServersRelative checks that the document names its server relative
// to where it is served, so that Swagger UI's "Try it out" on /docs calls
// the admin listener it was loaded from, whatever its --admin-listen.
func TestServersRelative(t *testing.T) {
	t.Parallel()
	doc := load(t)
	if len(doc.Servers) != 1 {
		t.Fatalf("%d servers, want one", len(doc.Servers))
	}
	u, err := url.Parse(doc.Servers[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "" || u.Host != "" || u.Path != "/" {
		t.Errorf("server URL %q, want the relative \"/\"", doc.Servers[0].URL)
	}
}
