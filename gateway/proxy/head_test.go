package proxy

import (
	"strings"
	"testing"
)

// TestCheckHead: the one request-head validation of every front (head.go)
// takes well-formed heads and refuses each malformed one with a detail
// that names what is wrong.
func TestCheckHead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		head string
		// why is a part of the detail wanted; "" means the head is fine.
		why string
	}{
		{"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", ""},
		{"GET /a?b=c HTTP/1.1\r\nHost: a.example:8080\r\nX-A: b\r\n\r\n", ""},
		{"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", ""},
		{"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", ""},
		{"GET / HTTP/1.1\r\nHost: \r\n\r\n", ""}, // empty: a target without an authority
		{"GET / HTTP/1.0\r\n\r\n", ""},           // HTTP/1.0 needs no Host
		{"GET http://a.example/x?y HTTP/1.1\r\nHost: a.example\r\n\r\n", ""},
		{"GET HTTPS://a.example HTTP/1.1\r\nHost: a.example\r\n\r\n", ""},
		{"OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n", ""},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", ""},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", ""},
		{"GET / HTTP/1.1\r\nHost: a\r\nX-A:\tb \r\n\r\n", ""},

		{"GET /\r\n\r\n", "no HTTP version"},
		{"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", "more than one space"},
		{"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", "HTTP version"},
		{"GET / HTTP/11\r\nHost: a\r\n\r\n", "HTTP version"},
		{"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", "method is not a token"},
		{"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", "control character"},
		{"GET / HTTP/1.1\nHost: a\r\n\r\n", "bare LF"},
		{"GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", "bare LF"},
		{"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", "folding"},
		{"GET / HTTP/1.1\r\nHost: a\r\nX A: b\r\n\r\n", `the header field name "X A" is not a token`},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length x: 5\r\n\r\n", "not a token"},
		{"GET / HTTP/1.1\r\nHost: a\r\nX/A: b\r\n\r\n", "not a token"},
		{"GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", "not a token"},
		{"GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", `"X-A " is followed by whitespace before its colon`},
		{"GET / HTTP/1.1\r\nHost: a\r\nX-A b\r\n\r\n", "no colon"},
		{"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x00c\r\n\r\n", `field "X-A" has a control character`},
		{"GET / HTTP/1.1\r\n\r\n", "without a Host"},
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "more than one Host"},
		{"GET / HTTP/1.1\r\nHost: user@evil.example\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: a.example, evil.example\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: a.example,evil.example\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: evil.example/path?q=\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: a .example\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: a.example\\evil\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: a.example:abc\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: a.example:1234567\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: a.example:65536\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: a.example:65535\r\n\r\n", ""},
		{"GET / HTTP/1.1\r\nHost: :80\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: [a.example]\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: [fe80::1%25en0]\r\n\r\n", "Host field"},
		{"GET / HTTP/1.1\r\nHost: a%2eexample\r\n\r\n", "Host field"},
		{"GET http://u<>@a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n", "authority"},
		{"GET http://user@evil.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n", "authority"},
		{"GET http:///x HTTP/1.1\r\nHost: a.example\r\n\r\n", "authority"},
		{"GET ftp://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n", "scheme"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", "both"},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", "both"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", "more than one Content-Length"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", "not a number"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", "not a number"},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "other than chunked"},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", "other than chunked"},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "other than chunked"},
	} {
		_, why := CheckHead([]byte(tc.head))
		if tc.why == "" && why != "" || tc.why != "" && !strings.Contains(why, tc.why) {
			t.Errorf("checkHead(%q) = %q; want %q", tc.head, why, tc.why)
		}
	}
}

// TestCheckHeadAllocs: the validation runs on every request of every
// front, and allocates nothing.
func TestCheckHeadAllocs(t *testing.T) {
	head := []byte("GET http://a.example/x HTTP/1.1\r\nHost: [::1]:8080\r\nX-A: b\r\nContent-Length: 0\r\nUpgrade: h2c\r\n\r\n")
	if n := testing.AllocsPerRun(100, func() {
		if _, why := CheckHead(head); why != "" {
			t.Fatal(why)
		}
		_ = IsH2CUpgrade("websocket, h2c")
	}); n != 0 {
		t.Errorf("%v allocations per head; want 0", n)
	}
}

// BenchmarkCheckHead is the validation's cost for a browser-sized head.
func BenchmarkCheckHead(b *testing.B) {
	head := []byte("GET /v1/items?page=2 HTTP/1.1\r\nHost: shop.example:8080\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n" +
		"Accept: text/html,application/xhtml+xml\r\nAccept-Language: en-GB,en;q=0.9\r\nAccept-Encoding: gzip, deflate, br\r\n" +
		"Cookie: sid=0123456789abcdef01234567; theme=dark\r\nConnection: keep-alive\r\n\r\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(head)))
	for b.Loop() {
		if _, why := CheckHead(head); why != "" {
			b.Fatal(why)
		}
	}
}
