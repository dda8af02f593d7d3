package h2server

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerDecoder turns a HEADERS frame and its CONTINUATIONs into the
// decoded field list, with the checks of x/net's Framer.ReadMetaHeaders
// (which allocated the frame, its field list as it grew and the decoder's
// callback anew for each block: nine allocations a request under h2load):
// one frame value and one field list, kept by the connection from one
// block to the next; the field strings are the decoder's (those of its
// tables, or new ones for literal fields), so a request keeps them safely.
type headerDecoder struct {
	dec  *hpack.Decoder
	meta http2.MetaHeadersFrame
	max  uint32 // the header list's limit (SETTINGS_MAX_HEADER_LIST_SIZE)

	// The current block's state, for emit.
	headersLeft, trailersLeft uint32
	sawRegular                bool
	invalid                   error
}

var (
	errFieldValue         = errors.New("h2server: invalid header field value")
	errFieldName          = errors.New("h2server: invalid header field name")
	errPseudoAfterRegular = errors.New("h2server: pseudo-header field after a regular one")
	errPseudoField        = errors.New("h2server: unknown or repeated pseudo-header field")
	errPseudoMix          = errors.New("h2server: request and response pseudo-header fields mixed")
)

// newHeaderDecoder returns a decoder for header lists of up to limit
// bytes (as SETTINGS_MAX_HEADER_LIST_SIZE counts them).
func newHeaderDecoder(limit uint32) *headerDecoder {
	d := &headerDecoder{max: limit}
	d.dec = hpack.NewDecoder(4096, d.emit)
	d.dec.SetMaxStringLength(int(min(limit, 1<<30)))
	return d
}

// emit takes one decoded field (hpack's callback).
func (d *headerDecoder) emit(hf hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		d.invalid = errFieldValue
	}
	if strings.HasPrefix(hf.Name, ":") {
		if d.sawRegular {
			d.invalid = errPseudoAfterRegular
		}
	} else {
		d.sawRegular = true
		if !validFieldName(hf.Name) {
			d.invalid = errFieldName
		}
	}
	if d.invalid != nil {
		d.dec.SetEmitEnabled(false)
		return
	}
	left, size := &d.headersLeft, hf.Size()
	if hf.Name == "trailer" {
		// Each name the Trailer field announces counts as a field of
		// its own (as x/net counts it).
		n := uint32(strings.Count(hf.Value, ",") + 1)
		left, size = &d.trailersLeft, uint32(len(hf.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *left {
		d.dec.SetEmitEnabled(false)
		d.meta.Truncated = true
		d.headersLeft, d.trailersLeft = 0, 0
		return
	}
	*left -= size
	d.meta.Fields = append(d.meta.Fields, hf)
}

// done lets go of the block just acted on: its field strings stay with
// the request that took them alone, and a block of very many fields does
// not leave its long list with the connection.
func (d *headerDecoder) done() {
	if cap(d.meta.Fields) > maxKeptFields {
		d.meta.Fields = nil
	} else {
		clear(d.meta.Fields)
		d.meta.Fields = d.meta.Fields[:0]
	}
	d.meta.HeadersFrame = nil
}

// maxKeptFields bounds the field list a connection keeps between blocks.
const maxKeptFields = 64

// validFieldName reports whether name is a token in lower case, as a
// field name must be in HTTP/2 (RFC 9113, section 8.2.1).
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if b >= 'A' && b <= 'Z' || !httpguts.IsTokenRune(rune(b)) {
			return false
		}
	}
	return true
}

// readHeaders decodes the header block that hf starts, reading the
// CONTINUATION frames that complete it from c.rf. The frame it returns
// is valid until the next call. Errors are those of ReadMetaHeaders: a
// connection error for a broken or oversized block, a stream error for
// a malformed field list.
func (c *conn) readHeaders(hf *http2.HeadersFrame) (*http2.MetaHeadersFrame, error) {
	d := c.hdec
	d.meta = http2.MetaHeadersFrame{HeadersFrame: hf, Fields: d.meta.Fields[:0]}
	d.headersLeft, d.trailersLeft = d.max, d.max
	d.sawRegular, d.invalid = false, nil
	d.dec.SetEmitEnabled(true)
	var frag interface{ HeaderBlockFragment() []byte } = hf
	ended := hf.HeadersEnded()
	for {
		b := frag.HeaderBlockFragment()
		// A block far over the limit is not decoded: the connection ends
		// (so does one that goes on after a malformed field, whose size
		// was not counted).
		if int64(len(b)) > 2*int64(d.headersLeft+d.trailersLeft) || d.invalid != nil {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := d.dec.Write(b); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		f, err := c.rf.ReadFrame()
		if err != nil {
			return nil, err
		}
		cf := f.(*http2.ContinuationFrame) // the Framer checks the order
		frag, ended = cf, cf.HeadersEnded()
	}
	if err := d.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if d.invalid != nil {
		return nil, http2.StreamError{StreamID: hf.StreamID, Code: http2.ErrCodeProtocol, Cause: d.invalid}
	}
	if err := checkPseudo(d.meta.PseudoFields()); err != nil {
		return nil, http2.StreamError{StreamID: hf.StreamID, Code: http2.ErrCodeProtocol, Cause: err}
	}
	return &d.meta, nil
}

// checkPseudo checks a block's pseudo-header fields: known names, none
// twice, not those of a request and a response at once.
func checkPseudo(pf []hpack.HeaderField) error {
	var request, response bool
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			response = true
		default:
			return errPseudoField
		}
		for _, prev := range pf[:i] {
			if prev.Name == hf.Name {
				return errPseudoField
			}
		}
	}
	if request && response {
		return errPseudoMix
	}
	return nil
}

// headerMaps are the Header maps of requests and answers, given back once
// the handler returned (run) and kept with their room: the two maps were
// three of a request's allocations. A handler keeps neither map past its
// return, as net/http's contract has it for the answer's; Dwara's
// handlers copy what they keep (the mirror's head, the logs' values).
var headerMaps = sync.Pool{New: func() any { return make(http.Header) }}

func newHeader() http.Header { return headerMaps.Get().(http.Header) }

// freeHeader empties h and gives it back to headerMaps; nil is ignored.
func freeHeader(h http.Header) {
	if h == nil {
		return
	}
	clear(h)
	headerMaps.Put(h)
}

// plainPath sets u to the URL of path, an origin-form request target
// ("/" first), as url.ParseRequestURI would, when its path has only bytes
// that the URL's escaping leaves as they are and the target no control
// byte; it reports whether it did. The others go to url.ParseRequestURI
// (its result a URL of its own), which percent-decodes and keeps the raw
// form.
func plainPath(u *url.URL, target string) bool {
	path, query, hasQuery := strings.Cut(target, "?")
	for i := 0; i < len(path); i++ {
		if !plainPathByte[path[i]] {
			return false
		}
	}
	for i := 0; i < len(query); i++ {
		if b := query[i]; b < 0x20 || b == 0x7f {
			return false
		}
	}
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	return true
}

// plainPathByte holds the bytes a path keeps unescaped in a URL: letters,
// digits, "-._~" and the reserved "$&+,/:;=@".
var plainPathByte = func() (t [256]bool) {
	for _, b := range []byte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~$&+,/:;=@") {
		t[b] = true
	}
	return t
}()
