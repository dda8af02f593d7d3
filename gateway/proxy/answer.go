package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// An endpoint's answer, read the same way on every front: the head is
// buffered whole in the connection's reader (bufferAnswerHead), parsed in
// place into an AnswerHead (status, field lines as spans over the
// buffered bytes, framing, whether the connection may carry another
// exchange), then its body is read through an answerBody, and the head
// is copied to the client by CopyAnswer into the front's own header
// (an AnswerSink). Nothing here allocates once an AnswerHead's slices
// have grown to an answer's size: a connection keeps its head and body
// reader across the answers it carries.
//
// What a head must be (RFC 9112, at least as strict as the parsers each
// front had before): a status line "HTTP/1.d DDD" with an optional reason
// after a space and no control character but tab in it; field names that
// are tokens, with no whitespace before the colon; values without control
// characters but tab (no CR, LF or NUL); no obsolete line folding. Lines
// may end in a bare LF (RFC 9112 section 2.2). Framing:
//   - Transfer-Encoding whose last coding is chunked: chunked; with a
//     Content-Length as well the Transfer-Encoding wins and the connection
//     is not reused (RFC 9112 section 6.3);
//   - a Transfer-Encoding whose last coding is not chunked: the body runs
//     to the close;
//   - Content-Length: one value, or a list (in one line or several) of
//     identical values; anything else is refused;
//   - none: the body runs to the close;
//   - but 1xx, 204 and 304 answers and answers to HEAD have no body.
// A connection is not reused after an HTTP/1.0 answer without
// "Connection: keep-alive", after "Connection: close", or after a body
// that ran to the close.

// AnswerField is one field line of an answer head or trailer section,
// its value without the whitespace around it. Both alias the bytes the
// head was parsed from.
type AnswerField struct{ Name, Value []byte }

// Framing is how an answer's body is delimited.
type Framing uint8

const (
	bodyNone    Framing = iota // no body (HEAD, 1xx, 204, 304)
	BodyLength                 // Content-Length
	BodyChunked                // the chunked transfer coding
	bodyToClose                // until the endpoint closes
)

// AnswerHead is a parsed answer head. Its spans alias the bytes it was
// parsed from: for an answer read from a connection, the connection's
// buffer, so they are valid until its body is read (CopyAnswer runs
// first); the trailers, read at the end of a chunked body, until the
// connection is read again. The zero value is ready to use; it is reused
// answer after answer.
type AnswerHead struct {
	minor  int // HTTP/1.minor
	Status int
	Fields []AnswerField
	// conn holds the tokens of every Connection line, trailers the
	// trailer section of a chunked body once it has been read.
	conn     [][]byte
	Trailers []AnswerField
	// Length is the Content-Length, -1 when there is none (even when the
	// framing is not bodyLength: a HEAD answer's length is its GET's).
	Length  int64
	Framing Framing
	// Close: the connection may not carry another exchange.
	Close bool
}

// The ways an answer head is malformed; the callers answer 502 for any
// (ExchangeFailure).
var (
	errAnswerStatusLine     = errors.New("malformed upstream answer: bad status line")
	errAnswerFieldName      = errors.New("malformed upstream answer: field name is not a token")
	errAnswerSpaceColon     = errors.New("malformed upstream answer: whitespace before a field's colon")
	errAnswerNoColon        = errors.New("malformed upstream answer: field line without a colon")
	errAnswerFieldValue     = errors.New("malformed upstream answer: control character in a field value")
	errAnswerObsFold        = errors.New("malformed upstream answer: obsolete line folding")
	errAnswerContentLength  = errors.New("malformed upstream answer: invalid or differing Content-Length values")
	errAnswerTooManyInterim = errors.New("more than 8 interim answers")
	errAnswerUnaskedSwitch  = errors.New("upstream switched protocols without an upgrade request")
	errTrailerTooLarge      = errors.New("upstream trailer section over the read buffer")
)

// answerFieldErrors is the error of each fault of an answer's field line
// (SplitField).
var answerFieldErrors = [...]error{
	fieldObsFold:    errAnswerObsFold,
	fieldNoColon:    errAnswerNoColon,
	fieldSpaceColon: errAnswerSpaceColon,
	fieldNotToken:   errAnswerFieldName,
	fieldCTL:        errAnswerFieldValue,
}

// maxInterimAnswers bounds the interim (1xx) answers skipped before the
// final one.
const maxInterimAnswers = 8

// nextLine splits the line at the start of b from the rest, without its
// line end (CRLF or a bare LF); b holds a whole head, so every line ends.
func nextLine(b []byte) (line, rest []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return b, nil
	}
	line, rest = b[:i], b[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest
}

// parse parses b, a whole answer head through its empty line, for a
// request that was a HEAD when head is true.
func (a *AnswerHead) parse(b []byte, head bool) error {
	a.Fields, a.conn, a.Trailers = a.Fields[:0], a.conn[:0], a.Trailers[:0]
	a.Length, a.Framing, a.Close = -1, bodyNone, false
	line, b := nextLine(b)
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || !isDigit(line[7]) || line[8] != ' ' ||
		!isDigit(line[9]) || !isDigit(line[10]) || !isDigit(line[11]) ||
		len(line) > 12 && (line[12] != ' ' || hasCTL(line[13:])) || line[9] == '0' {
		return errAnswerStatusLine
	}
	a.minor = int(line[7] - '0')
	a.Status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	var err error
	if a.Fields, err = parseFields(b, a.Fields); err != nil {
		return err
	}
	keepAlive, te, lastChunked := false, false, false
	for _, f := range a.Fields {
		switch {
		case EqualFoldASCII(f.Name, "Content-Length"):
			if err := a.addLength(f.Value); err != nil {
				return err
			}
		case EqualFoldASCII(f.Name, "Transfer-Encoding"):
			te = true
			for v := f.Value; len(v) > 0; {
				var c []byte
				c, v = cutToken(v)
				if len(c) > 0 {
					lastChunked = EqualFoldASCII(c, "chunked")
				}
			}
		case EqualFoldASCII(f.Name, "Connection"):
			for v := f.Value; len(v) > 0; {
				var c []byte
				c, v = cutToken(v)
				switch {
				case len(c) == 0:
					continue
				case EqualFoldASCII(c, "close"):
					a.Close = true
				case EqualFoldASCII(c, "keep-alive"):
					keepAlive = true
				}
				a.conn = append(a.conn, c)
			}
		}
	}
	switch {
	case head || a.Status < 200 || a.Status == 204 || a.Status == 304:
		a.Framing = bodyNone
	case te && lastChunked:
		a.Framing = BodyChunked
	case te:
		a.Framing = bodyToClose
	case a.Length >= 0:
		a.Framing = BodyLength
	default:
		a.Framing = bodyToClose
	}
	// Transfer-Encoding beside Content-Length: the former frames the body,
	// but a peer may have framed it by the latter, so nothing more is
	// trusted on the connection.
	if te && a.Length >= 0 || a.Framing == bodyToClose || a.minor == 0 && !keepAlive {
		a.Close = true
	}
	return nil
}

// addLength adds the values of a Content-Length line: each must be the
// same as every other.
func (a *AnswerHead) addLength(v []byte) error {
	if len(v) == 0 {
		return errAnswerContentLength
	}
	for len(v) > 0 {
		var c []byte
		c, v = cutToken(v)
		n, ok := parseLength(c)
		if !ok || a.Length >= 0 && n != a.Length {
			return errAnswerContentLength
		}
		a.Length = n
	}
	return nil
}

// cutToken returns the element of a comma-separated list at the start of
// v, without the whitespace around it, and the rest after its comma.
func cutToken(v []byte) (tok, rest []byte) {
	tok, rest, _ = bytes.Cut(v, []byte{','})
	return TrimOWS(tok), rest
}

// parseFields appends the field lines of b, through the empty line that
// ends them (or the end of b), to fields.
func parseFields(b []byte, fields []AnswerField) ([]AnswerField, error) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		if len(line) == 0 {
			break
		}
		name, value, fault := SplitField(line)
		if fault != FieldOK {
			return fields, answerFieldErrors[fault]
		}
		fields = append(fields, AnswerField{Name: name, Value: value})
	}
	return fields, nil
}

// Named reports whether a Connection line of the answer names the field
// k, which makes it hop-by-hop.
func (a *AnswerHead) Named(k []byte) bool {
	for _, c := range a.conn {
		if bytes.EqualFold(c, k) {
			return true
		}
	}
	return false
}

// BodyLength is the Content-Length of a body framed by it, else -1.
func (a *AnswerHead) BodyLength() int {
	if a.Framing != BodyLength {
		return -1
	}
	return int(a.Length)
}

// ReadAnswer reads the final answer head of the exchange on c, under the
// read deadline c has, into c.head, skipping interim answers (at most
// maxInterimAnswers), and makes c.answer read its body. head is true for
// an answer to HEAD; upgrade for a request that asked to switch
// protocols, the only one a 101 is taken for. The head is buffered whole
// first (bufferAnswerHead: over 16 KiB is errAnswerHeadTooLarge,
// counted in w).
func (c *Conn) ReadAnswer(w *protocolWatch, head, upgrade bool) error {
	a := &c.Head
	for n := 0; ; n++ {
		size, err := bufferAnswerHead(c.Reader, w)
		if err != nil {
			return err
		}
		b, _ := c.Reader.Peek(size)
		err = a.parse(b, head)
		_, _ = c.Reader.Discard(size)
		if err != nil {
			return err
		}
		if a.Status >= 200 || a.Status == 101 {
			break
		}
		if n >= maxInterimAnswers {
			return errAnswerTooManyInterim
		}
	}
	if a.Status == 101 && !upgrade {
		return errAnswerUnaskedSwitch
	}
	c.answer.reset(c.Reader, a)
	if c.tap != nil {
		c.tap.m = nil // tapped again by ExchangeRetrying for an alias request
	}
	return nil
}

// ReadTrailer reads the trailer section after a chunked body's last chunk
// from br, through its empty line, into a.trailers: chunkedBody's
// trailerReader.
func (a *AnswerHead) ReadTrailer(br *bufio.Reader) error {
	n, full, err := bufferUntil(br, fieldsEnd, MaxAnswerHead)
	switch {
	case full:
		return errTrailerTooLarge
	case err != nil:
		return err
	}
	b, _ := br.Peek(n)
	a.Trailers, err = parseFields(b, a.Trailers[:0])
	_, _ = br.Discard(n)
	return err
}

// fieldsEnd is AnswerHeadEnd for a section of field lines with no start
// line, which may be only its empty line.
func fieldsEnd(b []byte) int {
	switch {
	case len(b) > 0 && b[0] == '\n':
		return 1
	case len(b) > 1 && b[0] == '\r' && b[1] == '\n':
		return 2
	case len(b) < 2:
		return -1
	}
	return AnswerHeadEnd(b)
}

// answerBody reads an answer's body from the connection as its head
// frames it: a Content-Length, the chunked coding (trailers into the
// head), or until the endpoint closes. It reads nothing past the body's
// end. A connection keeps one, reset for each answer.
type answerBody struct {
	br      *bufio.Reader
	framing Framing
	left    int64 // of a Content-Length body
	chunked chunkedBody
	// fill, when not nil, copies what is read into the response cache
	// (cache.go); mem is the body of an answer from memory (inMemory).
	fill     *cacheFill
	mem      []byte
	inMemory bool
}

// reset makes b read the body a frames from br.
func (b *answerBody) reset(br *bufio.Reader, a *AnswerHead) {
	b.br, b.framing, b.left = br, a.Framing, a.Length
	b.fill, b.mem, b.inMemory = nil, nil, false
	if a.Framing == BodyChunked {
		b.chunked.reset(br, a)
	}
}

func (b *answerBody) Read(p []byte) (int, error) {
	if b.inMemory {
		return b.readMemory(p)
	}
	if b.fill != nil {
		n, err := b.read(p)
		b.tee(p[:n], err)
		return n, err
	}
	return b.read(p)
}

func (b *answerBody) read(p []byte) (int, error) {
	switch b.framing {
	case BodyChunked:
		return b.chunked.Read(p)
	case bodyToClose:
		return b.br.Read(p)
	case bodyNone:
		return 0, io.EOF
	}
	return b.readLength(b.br, p)
}

// readLength reads a Content-Length body from r into p: at most what is
// left of it, an end before that being io.ErrUnexpectedEOF.
func (b *answerBody) readLength(r io.Reader, p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := r.Read(p)
	b.left -= int64(n)
	if err != nil {
		return n, unexpected(err)
	}
	return n, nil
}

// BodyBuffered reports whether c.Reader holds the whole body of c's last
// answer, framed by a Content-Length (an answer without a body does not
// count): reading it reads nothing more from the connection.
func (c *Conn) BodyBuffered() bool {
	l := c.Head.BodyLength()
	return l >= 0 && c.Reader.Buffered() >= l
}

// AnswerStream is the body of c's last answer to stream, nil when it
// has none.
func (c *Conn) AnswerStream() io.Reader {
	if c.Head.Framing == bodyNone {
		return nil
	}
	if c.tap != nil && c.tap.m != nil {
		return c.tap
	}
	return &c.answer
}

// AnswerSink is a front's header of the answer it writes to its client,
// which CopyAnswer fills in. Implementations are pointers, so that
// passing one allocates nothing.
type AnswerSink interface {
	// Field adds a field line.
	Field(name, value []byte)
	// Trailer announces the trailer fields value lists.
	Trailer(value []byte)
	// End ends the head: rid as X-Request-Id unless it is "" (the
	// endpoint set one), then the status. It comes last, so a sink may
	// write the head then.
	End(code int, rid string)
}

// CopyAnswer copies the head of the endpoint's answer a to out: every
// field but the hop-by-hop ones and the framing (skipResponseHeader),
// those named in any Connection line, and Trailer, whose values are
// announced as the answer's trailers; then rid as X-Request-Id unless the
// endpoint set one, then the status. A field the front set before (a
// sticky session's Set-Cookie) stays first, the endpoint's come after.
func CopyAnswer(a *AnswerHead, out AnswerSink, rid string) {
	hasRID := false
	for _, f := range a.Fields {
		k := f.Name
		switch {
		case EqualFoldASCII(k, "Trailer"):
			if !a.Named(k) {
				out.Trailer(f.Value)
			}
			continue
		case skipResponseHeader(UnsafeString(k)) || a.Named(k):
			continue
		case EqualFoldASCII(k, "X-Request-Id"):
			hasRID = true
		}
		out.Field(k, f.Value)
	}
	if hasRID {
		rid = ""
	}
	out.End(a.Status, rid)
}

// skipResponseHeader reports whether the endpoint's field k is not copied
// to the client, whatever its case: the hop-by-hop fields (the client
// connection has its own) and the framing, which each front writes for its
// client.
func skipResponseHeader(k string) bool {
	var buf [len("proxy-authorization")]byte
	if len(k) > len(buf) {
		return false
	}
	for i := range len(k) {
		c := k[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	switch string(buf[:len(k)]) {
	case "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
		"te", "trailer", "transfer-encoding", "upgrade", "content-length":
		return true
	}
	return false
}

// First is the value of the answer's first field name, nil when it has
// none.
func (a *AnswerHead) First(name string) []byte {
	for _, f := range a.Fields {
		if EqualFoldASCII(f.Name, name) {
			return f.Value
		}
	}
	return nil
}
