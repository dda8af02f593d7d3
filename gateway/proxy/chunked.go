package proxy

import (
	"bufio"
	"errors"
	"io"
	"math"
	"strconv"
)

// chunkedBody decodes an endpoint's chunked answer body from br as RFC
// 9112 section 7.1 frames it: a chunk size in hex with any number of
// leading zeros and extensions ignored (ChunkSizeLine, which the request
// side's head check parses with too), a size line ended by CRLF or a bare
// LF and chunk data by CRLF (as Go's HTTP client reads them, so that
// every front frames an answer alike), and after the last chunk the
// trailer section, which trailer reads (through its empty line). It reads
// nothing past the body's end, so the connection's next answer starts
// where it stops. The zero value is not usable; set br and trailer. It
// must not be copied once in use.
type chunkedBody struct {
	br      *bufio.Reader
	trailer trailerReader
	left    int64 // of the current chunk; -1 before the first size line
	err     error // sticky: io.EOF once the trailer is read
}

// errBadChunk is a chunked body that does not parse.
var errBadChunk = errors.New("malformed chunked answer body")

// trailerReader reads a trailer section through its empty line, keeping
// the fields (AnswerHead does, into its trailers).
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

// maxChunkLine bounds a chunk-size line, extensions and line end
// included.
const maxChunkLine = 4096

// sizeLine reads a chunk-size line, ended by CRLF or a bare LF, and
// returns the size.
func (b *chunkedBody) sizeLine() (int64, error) {
	line, err := b.br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull || len(line) > maxChunkLine:
		return 0, errBadChunk
	case err != nil:
		return 0, unexpected(err)
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	size, _, ok := ChunkSizeLine(line)
	if !ok {
		return 0, errBadChunk
	}
	return size, nil
}

// ChunkSizeLine parses a chunk-size line without its line end (RFC 9112
// section 7.1): hex digits, then optional whitespace and extensions (from
// a ';'), no control character but tab. It returns the size and how many
// digits it had, leading zeros included (any number: the callers bound
// them as their peers need), and false for anything else or a size that
// overflows an int64.
func ChunkSizeLine(line []byte) (size int64, digits int, ok bool) {
	for ; digits < len(line) && IsHex(line[digits]); digits++ {
		if size > math.MaxInt64>>4 {
			return 0, 0, false
		}
		size = size<<4 | int64(Unhex(line[digits]))
	}
	if digits == 0 {
		return 0, 0, false
	}
	if hasCTL(line[digits:]) {
		return 0, 0, false
	}
	rest := TrimOWS(line[digits:])
	return size, digits, len(rest) == 0 || rest[0] == ';'
}

// chunkWriter writes what it is given as chunks of a chunked body on w:
// each Write one chunk (none for an empty one); the last chunk and the
// trailer section are the caller's. Errors surface at w's Flush.
type chunkWriter struct{ w *bufio.Writer }

func (cw chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	cw.w.Write(strconv.AppendInt(cw.w.AvailableBuffer(), int64(len(p)), 16))
	cw.w.WriteString("\r\n")
	n, err := cw.w.Write(p)
	cw.w.WriteString("\r\n")
	return n, err
}
