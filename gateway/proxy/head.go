package proxy

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strconv"
	"strings"
	"unsafe"
)

// Request-head validation, one for every front: a request head is checked
// as it came on the wire, before anything of it is routed or forwarded,
// and one that fails is answered 400 with what is wrong, and its connection
// closed (what follows on it cannot be framed with confidence).
//
// Every front checks the header block (CheckFields) and the target and
// Host (CheckTarget): the fasthttp front in fastRoute, from the header
// block fasthttp keeps as it came, the net/http front in its connection (headConn, headconn.go), from
// the bytes read, since net/http's parser repairs what it accepts
// (obsolete line folding, bare LF line ends, a Content-Length beside
// Transfer-Encoding) and leaves no trace of it in the request.
//
// What is refused, beyond what each server's own parser refuses:
//   - a request line that is not "method SP target SP HTTP/d.d" (HTTP/0.9
//     has no version: refused);
//   - a header line ended by a bare LF, an obsolete line folding, a field
//     name that is not an RFC 9110 token (a space or a slash in it, a
//     space before the colon, an empty name), a control character in a
//     field value;
//   - more than one Host field; a Host value that is not an authority
//     (RFC 3986 section 3.2 without userinfo): a name of letters, digits,
//     '-', '.' and '_', an IPv4 address or a bracketed IPv6 address, and an
//     optional numeric port; so no userinfo, list, path, query, space,
//     backslash, percent-encoding or bracketed name;
//   - an absolute-form target whose scheme is not http or https, or whose
//     authority is not one as above (userinfo included);
//   - HTTP/1.1 without Host;
//   - framing the gateway will not guess at: more than one Content-Length
//     field, one that is not digits only, Transfer-Encoding together with
//     Content-Length (RFC 9112 section 6.1 lets a server go by
//     Transfer-Encoding; the ambiguity is the smuggling vector), a
//     Transfer-Encoding other than exactly "chunked" or in more than one
//     field.
//
// They run on every request and allocate nothing, but a refusal's detail
// (BenchmarkCheckHead, TestCheckHeadAllocs).

// HeadFields is what CheckFields learned of a header block.
type HeadFields struct {
	// host is the Host field's value, without the surrounding whitespace;
	// hasHost reports whether there was one.
	host    []byte
	hasHost bool
	// ContentLength is the Content-Length value, -1 when there is none;
	// chunked reports Transfer-Encoding: chunked.
	ContentLength int64
	Chunked       bool
	// Upgrade reports an Upgrade field (whether Connection names it is for
	// the caller to see).
	Upgrade bool
}

// CheckRequestLine checks a request line without its line end and returns
// what is wrong with it, or "".
func CheckRequestLine(line []byte) string {
	method, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return "the request line has no request target"
	}
	if !isToken(UnsafeString(method)) {
		return "the request method is not a token"
	}
	target, version, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return "the request line has no HTTP version (HTTP/0.9 is not served)"
	}
	if len(target) == 0 {
		return "the request line has more than one space between its parts"
	}
	for _, c := range target {
		if c <= ' ' || c == 0x7f {
			return "the request target has a control character or a space"
		}
	}
	if len(version) != 8 || string(version[:5]) != "HTTP/" || !isDigit(version[5]) || version[6] != '.' || !isDigit(version[7]) {
		return "the request line does not end with an HTTP version (HTTP/d.d)"
	}
	return ""
}

// CheckFields checks a header block as it came on the wire: the lines
// after the request line, each ended by CRLF, through the empty line that
// ends the head (or the end of raw). It returns what it learned, and what
// is wrong, or "".
func CheckFields(raw []byte) (HeadFields, string) {
	f := HeadFields{ContentLength: -1}
	te := 0
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i < 0 {
			raw = nil // a last line without its end
		} else if i == 0 || raw[i-1] != '\r' {
			return f, "a header line ends with a bare LF"
		} else {
			line, raw = raw[:i-1], raw[i+1:]
		}
		if len(line) == 0 {
			break // the end of the head
		}
		name, value, fault := SplitField(line)
		switch fault {
		case fieldObsFold:
			return f, "obsolete line folding"
		case fieldNoColon:
			return f, "the header line " + quoteField(line) + " has no colon"
		case fieldSpaceColon:
			return f, "the header field name " + quoteField(name) + " is followed by whitespace before its colon"
		case fieldNotToken:
			return f, "the header field name " + quoteField(name) + " is not a token"
		case fieldCTL:
			return f, "the value of the header field " + quoteField(name) + " has a control character"
		}
		switch {
		case EqualFoldASCII(name, "Host"):
			if f.hasHost {
				return f, "more than one Host field"
			}
			f.host, f.hasHost = value, true
		case EqualFoldASCII(name, "Content-Length"):
			if f.ContentLength >= 0 {
				return f, "more than one Content-Length field"
			}
			n, ok := parseLength(value)
			if !ok {
				return f, "the Content-Length is not a number"
			}
			f.ContentLength = n
		case EqualFoldASCII(name, "Transfer-Encoding"):
			te++
			f.Chunked = EqualFoldASCII(value, "chunked")
		case EqualFoldASCII(name, "Upgrade"):
			f.Upgrade = true
		}
	}
	switch {
	case te > 0 && f.ContentLength >= 0:
		return f, "both Transfer-Encoding and Content-Length"
	case te > 1 || te == 1 && !f.Chunked:
		return f, "a Transfer-Encoding other than chunked"
	}
	return f, ""
}

// FieldFault is what is wrong with a header field line: FieldOK when
// nothing.
type FieldFault uint8

const (
	FieldOK         FieldFault = iota
	fieldObsFold               // it starts with whitespace: obsolete line folding
	fieldNoColon               // it has no colon
	fieldSpaceColon            // whitespace between the name and its colon
	fieldNotToken              // the name is empty or not a token
	fieldCTL                   // the value has a control character
)

// SplitField splits a field line of a head or a trailer section (not
// empty, without its line end) into its name and its value without the
// whitespace around it, by the one grammar every front holds requests,
// answers and trailers to (RFC 9112 section 5): a token, a colon, a value
// with no control character but tab. On a fault, name is what stands
// before the first colon (the whole line when there is none), for the
// caller to say so.
func SplitField(line []byte) (name, value []byte, fault FieldFault) {
	if line[0] == ' ' || line[0] == '\t' {
		return nil, nil, fieldObsFold
	}
	// The name is the token before the colon, scanned once.
	colon := 0
	for colon < len(line) && tokenChar[line[colon]] {
		colon++
	}
	if colon == len(line) || line[colon] != ':' || colon == 0 {
		end := bytes.IndexByte(line, ':')
		switch {
		case end < 0:
			return line, nil, fieldNoColon
		case end > 0 && (line[end-1] == ' ' || line[end-1] == '\t'):
			return line[:end], nil, fieldSpaceColon
		}
		return line[:end], nil, fieldNotToken
	}
	name, value = line[:colon], TrimOWS(line[colon+1:])
	if hasCTL(value) {
		return name, value, fieldCTL
	}
	return name, value, FieldOK
}

// CheckTarget checks the request target (as it came) and the Host the
// header block had, for a request of method in HTTP version proto
// ("HTTP/1.1"), and returns what is wrong, or "".
func CheckTarget(method, target, proto []byte, f HeadFields) string {
	if f.hasHost && !validAuthority(f.host, true) {
		return "the Host field is not a host with an optional port"
	}
	if !f.hasHost && string(proto) == "HTTP/1.1" {
		return "an HTTP/1.1 request without a Host field"
	}
	if len(target) == 0 || target[0] == '/' || string(target) == "*" || string(method) == "CONNECT" {
		return "" // origin and asterisk form; CONNECT is refused by route
	}
	i := bytes.Index(target, []byte("://"))
	if i < 0 {
		return "" // not a path: fastRoutePath refuses it
	}
	if scheme := target[:i]; !EqualFoldASCII(scheme, "http") && !EqualFoldASCII(scheme, "https") {
		return "the request target's scheme is not http or https"
	}
	rest := target[i+3:]
	authority := rest
	if j := bytes.IndexAny(rest, "/?#"); j >= 0 {
		authority = rest[:j]
	}
	if !validAuthority(authority, false) {
		return "the request target's authority is not a host with an optional port"
	}
	return ""
}

// CheckHead checks a whole request head as it came on the wire, from its
// request line through the empty line that ends it: CheckRequestLine,
// CheckFields and CheckTarget. It returns what CheckFields learned, and
// what is wrong, or "".
func CheckHead(raw []byte) (HeadFields, string) {
	i := bytes.IndexByte(raw, '\n')
	if i < 0 {
		return HeadFields{}, "the request head is not complete"
	}
	if i == 0 || raw[i-1] != '\r' {
		return HeadFields{}, "the request line ends with a bare LF"
	}
	line := raw[:i-1]
	if why := CheckRequestLine(line); why != "" {
		return HeadFields{}, why
	}
	f, why := CheckFields(raw[i+1:])
	if why != "" {
		return f, why
	}
	method, rest, _ := bytes.Cut(line, []byte{' '})
	target, proto, _ := bytes.Cut(rest, []byte{' '})
	return f, CheckTarget(method, target, proto, f)
}

// validAuthority reports whether a is a host with an optional port: a
// name of letters, digits, '-', '.' and '_' (which takes IPv4 addresses
// too), or an IPv6 address in brackets, then ":" and a port up to 65535.
// empty allows "" (a Host field may be empty; a target's authority not).
func validAuthority(a []byte, empty bool) bool {
	if len(a) == 0 {
		return empty
	}
	host, port := a, []byte(nil)
	if a[0] == '[' {
		end := bytes.IndexByte(a, ']')
		if end < 0 {
			return false
		}
		ip, err := netip.ParseAddr(UnsafeString(a[1:end]))
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return false
		}
		host, port = nil, a[end+1:]
	} else if i := bytes.IndexByte(a, ':'); i >= 0 {
		host, port = a[:i], a[i:]
	}
	for _, c := range host {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	if len(port) == 0 {
		return a[0] == '[' || len(host) > 0
	}
	if port[0] != ':' || len(port) > 6 {
		return false
	}
	n := 0
	for _, c := range port[1:] {
		if !isDigit(c) {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535 && (a[0] == '[' || len(host) > 0)
}

// hasCTL reports whether a field value has a control character other than
// a tab (NUL, CR, DEL...: RFC 9110 section 5.5). It looks at eight bytes at
// a time, and at single bytes only around a control character or a tab.
func hasCTL(v []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(v) >= 8 {
		w := binary.LittleEndian.Uint64(v)
		del := w ^ (0x7f * ones)
		// A byte below 0x20, or a DEL, sets its high bit here (bytes of
		// 0x80 and above, obs-text, are allowed and masked out by ^w).
		if ((w-0x20*ones)&^w|(del-ones)&^del)&highs != 0 {
			break
		}
		v = v[8:]
	}
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}

// quoteField quotes the start of a field name or line for a detail (only
// a refusal builds one).
func quoteField(b []byte) string {
	return strconv.Quote(string(b[:min(len(b), 64)]))
}

// parseLength parses a Content-Length value: 1 to 18 digits.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// TrimOWS trims the optional whitespace (spaces and tabs) around a field
// value.
func TrimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isToken reports whether s is an RFC 9110 token: one or more of the
// visible ASCII characters but the delimiters.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if !tokenChar[s[i]] {
			return false
		}
	}
	return true
}

// tokenChar is RFC 9110's tchar.
var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// IsH2CUpgrade reports whether an Upgrade field value offers h2c. Such an
// upgrade is never honoured: the gateway does not speak HTTP/2 without
// TLS to endpoints, so the request is forwarded as a plain HTTP/1.1
// request without its Upgrade and HTTP2-Settings fields (as nginx does),
// whatever else the field offers.
func IsH2CUpgrade(v string) bool {
	for v != "" {
		var tok string
		tok, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(strings.Trim(tok, " \t"), "h2c") {
			return true
		}
	}
	return false
}

// IsHex reports whether c is a hexadecimal digit.
func IsHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Unhex is the value of c, a hexadecimal digit (IsHex).
func Unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// EqualFoldASCII reports whether b and s are equal, ASCII case aside.
func EqualFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// UnsafeString views b as a string without copying. The string must not outlive
// the request that b belongs to, nor be used after b changes.
func UnsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
