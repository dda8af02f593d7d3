package proxy

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestChunkedBody decodes chunked bodies as RFC 9112 frames them, reads
// nothing past the body's end, and refuses what does not parse.
func TestChunkedBody(t *testing.T) {
	t.Parallel()
	const next = "HTTP/1.1 200 OK\r\n"
	for _, tc := range []struct {
		name, in, want, trailer string
		err                     error
	}{
		{name: "plain", in: "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", want: "hello world"},
		{name: "leading-zeros", in: "0000000000000005\r\nhello\r\n00000\r\n\r\n", want: "hello"},
		{name: "upper-hex-ext", in: "B;name=v\r\nhello world\r\n0;x\r\n\r\n", want: "hello world"},
		{name: "bare-lf-size-line", in: "5\nhello\r\n0\n\r\n", want: "hello"},
		{name: "trailer", in: "2\r\nok\r\n0\r\nX-Sum: 42\r\n\r\n", want: "ok", trailer: "42"},
		{name: "17-digits", in: "10000000000000000\r\n", err: errBadChunk},
		{name: "no-crlf-after-data", in: "2\r\nokX\r\n0\r\n\r\n", err: errBadChunk},
		{name: "bare-lf-after-data", in: "2\r\nok\n0\r\n\r\n", err: errBadChunk},
		{name: "empty-size", in: "\r\nok\r\n", err: errBadChunk},
		{name: "junk-size", in: "2x\r\nok\r\n", err: errBadChunk},
		{name: "ctl-in-ext", in: "2;a\x01\r\nok\r\n", err: errBadChunk},
		{name: "cut", in: "5\r\nhel", err: io.ErrUnexpectedEOF},
		{name: "cut-before-trailer", in: "2\r\nok\r\n0\r\n", err: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in + next
			if tc.err == io.ErrUnexpectedEOF {
				in = tc.in // the connection ends there
			}
			br := bufio.NewReader(strings.NewReader(in))
			var h fasthttp.ResponseHeader
			var b chunkedBody
			b.reset(br, &h)
			got, err := io.ReadAll(&b)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v (read %q)", err, tc.err, got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
			if v := string(h.Peek("X-Sum")); v != tc.trailer {
				t.Errorf("trailer X-Sum = %q, want %q", v, tc.trailer)
			}
			rest, _ := io.ReadAll(br)
			if string(rest) != next {
				t.Errorf("left %q after the body, want %q", rest, next)
			}
		})
	}
}

// TestAnswerHeadEnd finds the end of an answer head whatever its line
// ends, and bufferAnswerHead refuses one over the buffer.
func TestAnswerHeadEnd(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{
		"HTTP/1.1 200 OK\r\n\r\nbody":         19,
		"HTTP/1.1 200 OK\n\nbody":             17,
		"HTTP/1.1 200 OK\r\nA: b\n\r\nx":      24,
		"HTTP/1.1 200 OK\r\nA: b\r\n":         -1,
		"HTTP/1.1 200 OK\r\nA: b\r\n\r":       -1,
		"":                                    -1,
		"HTTP/1.1 204 No Content\n\nHTTP/1.1": 25,
	} {
		if got := AnswerHeadEnd([]byte(in)); got != want {
			t.Errorf("answerHeadEnd(%q) = %d, want %d", in, got, want)
		}
	}
	big := "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 100) + "\r\n\r\n"
	if _, err := bufferAnswerHead(bufio.NewReaderSize(strings.NewReader(big), 64), nil); err != errAnswerHeadTooLarge {
		t.Errorf("a head over the buffer: %v, want errAnswerHeadTooLarge", err)
	}
	if n, err := bufferAnswerHead(bufio.NewReaderSize(iotestOneByte(big), 256), nil); err != nil || n != len(big) {
		t.Errorf("a head a byte at a time: %d, %v; want %d", n, err, len(big))
	}
	// The cap is MaxAnswerHead, not the (larger) connection buffer: a head
	// of exactly the cap is read, one a byte over it is not, and neither
	// is one that ends past the cap in a buffer that holds it.
	at := func(size int) string {
		pre := "HTTP/1.1 200 OK\r\nX: "
		return pre + strings.Repeat("a", size-len(pre)-4) + "\r\n\r\n"
	}
	for _, tc := range []struct {
		size int
		want error
	}{{MaxAnswerHead, nil}, {MaxAnswerHead + 1, errAnswerHeadTooLarge}} {
		head := at(tc.size) + "body"
		n, err := bufferAnswerHead(bufio.NewReaderSize(strings.NewReader(head), ConnBufferSize), nil)
		if err != tc.want || err == nil && n != tc.size {
			t.Errorf("a head of %d bytes in a %d-byte buffer: %d, %v; want %v", tc.size, ConnBufferSize, n, err, tc.want)
		}
	}
}

// iotestOneByte reads s one byte per Read.
func iotestOneByte(s string) io.Reader { return &oneByte{s: s} }

type oneByte struct{ s string }

func (r *oneByte) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0], r.s = r.s[0], r.s[1:]
	return 1, nil
}

// TestRequestHeadAndChunksAllocateNothing: the head writer's
// Content-Length and a chunk's size line are formatted in the writer's
// own buffer, so writing a request head with a body, and a chunked body,
// allocates nothing. Not parallel: AllocsPerRun.
func TestRequestHeadAndChunksAllocateNothing(t *testing.T) {
	tg := &Target{HdrService: []string{"web"}, HdrUpstream: []string{"stable"}, HdrGeneration: []string{"7"}}
	r := &Request{Method: "POST", Target: "/upload", Host: "web.example", RequestID: "id-1", ClientIP: "192.0.2.1", Length: 4096}
	r.AddField("Content-Type", "application/octet-stream")
	var sb strings.Builder
	bw := bufio.NewWriterSize(&sb, 4096)
	r.writeHead(bw, "10.0.0.1:8080", tg, nil)
	cw := chunkWriter{bw}
	cw.Write([]byte("0123456789abcdefg"))
	bw.Flush()
	for _, want := range []string{"POST /upload HTTP/1.1\r\n", "\r\nContent-Length: 4096\r\n", "\r\n\r\n11\r\n0123456789abcdefg\r\n"} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("written %q; want it to hold %q", sb.String(), want)
		}
	}
	chunk := make([]byte, 300)
	bw.Reset(io.Discard)
	if allocs := testing.AllocsPerRun(100, func() {
		r.writeHead(bw, "10.0.0.1:8080", tg, nil)
		cw.Write(chunk)
		bw.Flush()
	}); allocs > 0 {
		t.Errorf("a request head and a chunk allocate %v times; want none", allocs)
	}
}
