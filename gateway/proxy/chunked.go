package proxy

import (
	"bufio"
	"errors"
	"io"
)

// chunkedBody decodes an endpoint's chunked answer body from br as RFC
// 9112 section 7.1 frames it: a chunk size in hex (leading zeros allowed,
// at most 16 significant digits), extensions ignored, a size line ended by
// CRLF or a bare LF and chunk data by CRLF (as Go's HTTP client reads
// them, so that every front frames an answer alike), and after the last
// chunk the trailer section, which trailer reads (through its empty line). It reads nothing
// past the body's end, so the connection's next answer starts where it
// stops. The zero value is not usable; set br and trailer. It must not be
// copied once in use.
type chunkedBody struct {
	br      *bufio.Reader
	trailer trailerReader
	left    int64 // of the current chunk; -1 before the first size line
	err     error // sticky: io.EOF once the trailer is read
}

// errBadChunk is a chunked body that does not parse.
var errBadChunk = errors.New("malformed chunked answer body")

// trailerReader reads a trailer section through its empty line (a
// fasthttp.ResponseHeader does, keeping the fields).
type trailerReader interface {
	ReadTrailer(*bufio.Reader) error
}

// reset makes b decode a new body from br.
func (b *chunkedBody) reset(br *bufio.Reader, trailer trailerReader) {
	*b = chunkedBody{br: br, trailer: trailer, left: -1}
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left <= 0 {
		if b.left == 0 {
			if b.err = b.lineEnd(); b.err != nil {
				return 0, b.err
			}
		}
		size, err := b.sizeLine()
		if err != nil {
			b.err = err
			return 0, err
		}
		if size == 0 {
			if err := b.trailer.ReadTrailer(b.br); err != nil {
				b.err = unexpected(err)
				return 0, b.err
			}
			b.err = io.EOF
			return 0, io.EOF
		}
		b.left = size
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	if err != nil {
		b.err = unexpected(err)
		return n, b.err
	}
	return n, nil
}

// unexpected is err, with an end of file taken for a cut body.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// lineEnd reads the CRLF that ends a chunk's data (a bare LF is not
// taken here, as Go's HTTP client does not: RFC 9112 allows it only for
// the start line and fields).
func (b *chunkedBody) lineEnd() error {
	crlf, err := b.br.Peek(2)
	if err != nil {
		return unexpected(err)
	}
	if crlf[0] != '\r' || crlf[1] != '\n' {
		return errBadChunk
	}
	_, _ = b.br.Discard(2)
	return nil
}

// maxChunkLine bounds a chunk-size line, extensions included.
const maxChunkLine = 4096

// sizeLine reads a chunk-size line and returns the size.
func (b *chunkedBody) sizeLine() (int64, error) {
	var size uint64
	digits, significant := 0, 0
	inExt := false
	for n := 0; ; n++ {
		if n > maxChunkLine {
			return 0, errBadChunk
		}
		c, err := b.br.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		switch {
		case c == '\n':
			if digits == 0 {
				return 0, errBadChunk
			}
			if size > 1<<62 {
				return 0, errBadChunk
			}
			return int64(size), nil
		case c == '\r':
			if next, err := b.br.ReadByte(); err != nil || next != '\n' {
				return 0, errBadChunk
			}
			if digits == 0 || size > 1<<62 {
				return 0, errBadChunk
			}
			return int64(size), nil
		case inExt:
			if c < ' ' && c != '\t' || c == 0x7f {
				return 0, errBadChunk
			}
		case c == ';' || c == ' ' || c == '\t':
			if digits == 0 {
				return 0, errBadChunk
			}
			inExt = true
		case isHex(c):
			digits++
			if size == 0 && c == '0' {
				continue // a leading zero
			}
			if significant++; significant > 16 {
				return 0, errBadChunk
			}
			size = size<<4 | uint64(unhex(c))
		default:
			return 0, errBadChunk
		}
	}
}
