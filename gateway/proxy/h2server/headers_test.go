package h2server

import (
	"bytes"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/dwara/dwara/internal/testrun"
)

// TestHeaderBlocksKeptApart checks the decoding of header blocks into
// the field list a connection reuses: a block split over HEADERS and
// CONTINUATION is decoded whole, and a request's header (read by its
// handler only after the next block on the connection was decoded)
// keeps its own fields, none of the next one's.
func TestHeaderBlocksKeptApart(t *testing.T) {
	t.Parallel()
	second := make(chan struct{})
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/b" {
			close(second)
		} else {
			testrun.Recv(t, second, "the second request's handler")
		}
		var got []string
		for k, vv := range r.Header {
			got = append(got, k+"="+strings.Join(vv, ","))
		}
		slices.Sort(got)
		w.Header().Set("X-Got", strings.Join(got, ";"))
	})})
	rc := ts.dialRaw(t)
	rc.hbuf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "h2.test"},
		{":path", "/a"}, {"x-one", "1"}, {"x-two", strings.Repeat("2", 40)}} {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := bytes.Clone(rc.hbuf.Bytes())
	half := len(block) / 2
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:half], EndStream: true}); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteContinuation(1, true, block[half:]); err != nil {
		t.Fatal(err)
	}
	rc.request(3, http.MethodGet, "/b", true, "x-three", "3")
	want := map[uint32]string{1: "X-One=1;X-Two=" + strings.Repeat("2", 40), 3: "X-Three=3"}
	for range 2 {
		f := rc.until("an answer", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
		if got := fieldValue(f, "x-got"); got != want[f.StreamID] {
			t.Errorf("stream %d's handler saw the header %q; want %q", f.StreamID, got, want[f.StreamID])
		}
	}
}

// TestHeaderDecoderDone checks what a connection keeps of a block once it
// was acted on: a short field list, emptied (no field strings held past
// their request), and no list at all after a block of very many fields.
func TestHeaderDecoderDone(t *testing.T) {
	t.Parallel()
	d := newHeaderDecoder(1 << 20)
	d.meta.Fields = append(d.meta.Fields, hpack.HeaderField{Name: "x-a", Value: "1"}, hpack.HeaderField{Name: "x-b", Value: "2"})
	d.done()
	if len(d.meta.Fields) != 0 || cap(d.meta.Fields) == 0 {
		t.Fatalf("after a short block: %d fields, capacity %d; want none, the list kept", len(d.meta.Fields), cap(d.meta.Fields))
	}
	for i, f := range d.meta.Fields[:2] {
		if f != (hpack.HeaderField{}) {
			t.Errorf("field %d still holds %v", i, f)
		}
	}
	d.meta.Fields = make([]hpack.HeaderField, maxKeptFields+1)
	d.done()
	if d.meta.Fields != nil {
		t.Errorf("after a block of %d fields the list of capacity %d is kept; want it dropped", maxKeptFields+1, cap(d.meta.Fields))
	}
}

// plainPathTargets are request targets for the comparison of plainPath
// with url.ParseRequestURI: plain ones, and each kind it leaves to
// ParseRequestURI.
var plainPathTargets = []string{
	"/", "/a/b/c", "/a?b=c&d=e", "/a?", "/?", "/a??b", "//host/x", "/a;b,c=d@e:f$g&h+i~j_k.l-m",
	"/a%20b", "/a b", "/a#frag", "/a?b#c", "/caf\u00e9", "/a\x7f", "/a?b\x01", "/a!b", "/(x)*'",
	"/a\"b", "/a<b>", "/a\\b", "/a^b`c{d|e}", "/%zz", "/a/./b/../c", "/a?q=%zz", "/a?b?c",
}

// TestPlainPath: where plainPath takes a target, its URL is the one
// url.ParseRequestURI makes; the plain targets are taken, and no target
// with a byte that escaping changes is.
func TestPlainPath(t *testing.T) {
	t.Parallel()
	taken := 0
	for _, target := range plainPathTargets {
		if checkPlainPath(t, target) {
			taken++
		}
	}
	if taken != 12 {
		t.Errorf("plainPath took %d of the targets, want the 12 plain ones", taken)
	}
}

// FuzzPlainPath compares plainPath with url.ParseRequestURI on any
// origin-form target.
func FuzzPlainPath(f *testing.F) {
	for _, target := range plainPathTargets {
		f.Add(target)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if !strings.HasPrefix(target, "/") {
			return
		}
		checkPlainPath(t, target)
	})
}

// checkPlainPath fails t when plainPath takes target with a URL other
// than url.ParseRequestURI's, and reports whether it took it.
func checkPlainPath(t *testing.T, target string) bool {
	t.Helper()
	var u url.URL
	if !plainPath(&u, target) {
		return false
	}
	want, err := url.ParseRequestURI(target)
	if err != nil {
		t.Errorf("plainPath took %q, which url.ParseRequestURI refuses: %v", target, err)
		return true
	}
	if u != *want {
		t.Errorf("plainPath(%q) = %#v, url.ParseRequestURI: %#v", target, u, *want)
	}
	return true
}
