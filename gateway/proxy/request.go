package proxy

import (
	"bufio"
	"strconv"
	"strings"

	"github.com/dwara/dwara/gateway/affinity"
)

// Request is the forwarding core's view of one client request on its way
// to an endpoint, whichever front parsed it: what the one request-head
// writer (WriteHead), the retry rules (retry.go) and the logs need, and
// nothing else of the request. A front fills it from its server's request
// (httpfront's httpOutbound, fastfront's fastOutbound); the strings may view the front's own
// buffers, so a Request is valid only while the front's request is
// unchanged. Fronts keep one per exchange and reuse its slices, so filling
// one does not allocate once warmed up.
type Request struct {
	// Method is the request method; "" is not checked by route (a front
	// that refuses the methods of refuse itself).
	Method string
	// Target is the request target as forwarded: origin form ("/path?q"),
	// or "*".
	Target string
	// Host is the client's Host: what route matches, and the
	// X-Forwarded-Host sent upstream.
	Host string
	// Path is the target's path, percent-decoded, that route matches and
	// checks for dot segments.
	Path string
	// Cookies are the Cookie field lines, for the sticky session.
	Cookies []string
	// fields are the client's header fields as its front parsed them,
	// names in canonical form; the writer leaves out what is not forwarded.
	fields []field
	// Length is the body's: its Content-Length when positive, -1 for a
	// body of unknown length (sent chunked), 0 for none.
	Length int64
	// Trailers are the names of the trailer fields the client announced,
	// for a body sent chunked.
	Trailers []string
	// ClientIP is the peer's address, never a header.
	ClientIP string
	TLS      bool
	// Upgrade is the client's Upgrade value for an upgrade request; ""
	// for any other.
	Upgrade string
	// RequestID is well-formed: the client's, or a fresh one.
	RequestID string
	// Service is the routed service's name (set once routed), for the logs.
	Service string
	// CookieBuf holds a front's one Cookie line, for cookies.
	CookieBuf [1]string
	// setCookie holds a new session's Set-Cookie value (Route.SetCookie),
	// kept from request to request (Reset).
	setCookie []byte
	// Body gives the request's body to Route for a service whose route
	// depends on it (model aliases, models.go); nil: such a request is
	// routed as any other.
	Body BodySource
}

// get returns the value of the first of r's fields named name (in any
// case), "" when there is none: a service's override header.
func (r *Request) get(name string) string {
	for _, f := range r.fields {
		if len(f.name) == len(name) && strings.EqualFold(f.name, name) {
			return f.value
		}
	}
	return ""
}

// Header returns the value of the first of r's fields named lowerName (in
// any case), and whether there is one: what a match rule reads
// (match.Request). It does not allocate.
func (r *Request) Header(lowerName string) (string, bool) {
	for _, f := range r.fields {
		if len(f.name) == len(lowerName) && strings.EqualFold(f.name, lowerName) {
			return f.value, true
		}
	}
	return "", false
}

// Cookie returns the value of the first cookie called name of r's Cookie
// lines, and whether there is one (match.Request). It does not allocate.
func (r *Request) Cookie(name string) (string, bool) {
	return affinity.ReadCookieLines(r.Cookies, name)
}

// field is one header field line.
type field struct{ name, value string }

// replayable reports whether r may be sent again after it may have
// reached the endpoint: a safe method without a body (retry.go).
func (r *Request) replayable() bool { return safeMethod(r.Method) && r.Length == 0 }

// AddField appends a field to r's fields.
func (r *Request) AddField(name, value string) {
	r.fields = append(r.fields, field{name, value})
}

// Reset empties r, keeping its slices for the next request.
func (r *Request) Reset() {
	clear(r.fields)
	clear(r.Trailers)
	*r = Request{fields: r.fields[:0], Trailers: r.Trailers[:0], CookieBuf: r.CookieBuf, setCookie: r.setCookie[:0]}
	r.CookieBuf[0] = ""
}

// maxConnectionLines is how many Connection lines writeHead collects
// without allocating; more are collected all the same.
const maxConnectionLines = 8

// WriteHead writes the request line and header of r for ep, an endpoint
// of target tg, on bw: see writeHead. It is how a front writes the head of
// each exchange (sendFunc).
func (r *Request) WriteHead(bw *bufio.Writer, ep *Endpoint, tg *Target) {
	r.writeHead(bw, ep.HostHeader, tg, nil)
}

// writeHead writes the request line and header of r for an endpoint whose
// Host field is host, reached by target tg: the client's fields without
// the hop-by-hop ones (RFC 9110 section 7.6.1: the fixed set and every
// field named in any Connection line), without its X-Dwara-* and
// X-Request-Id fields, and without the framing and X-Forwarded-* fields;
// then the gateway's set (X-Request-Id, X-Dwara-Service, -Upstream,
// -Generation, X-Forwarded-For/-Host/-Proto), Connection: Upgrade and the
// Upgrade field for an upgrade, and the body's framing. A copy for the
// mirror m (not nil) names m's upstream and carries X-Dwara-Mirror: 1.
// It is the one writer of a request head to an endpoint, on every front
// and for mirrors. Errors surface at Flush.
func (r *Request) writeHead(bw *bufio.Writer, host string, tg *Target, m *mirror) {
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(r.Target)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	var connBuf [maxConnectionLines]string
	conn := connBuf[:0]
	for _, f := range r.fields {
		if f.name == "Connection" {
			conn = append(conn, f.value)
		}
	}
	for _, f := range r.fields {
		// The gateway's own fields are written below; a client naming
		// them in Connection does not take them away.
		if skipRequestHeader(f.name) || gatewayField(f.name) || NamedIn(conn, f.name) {
			continue
		}
		WriteField(bw, f.name, f.value)
	}
	upstream := tg.HdrUpstream[0]
	if m != nil {
		upstream = m.hdrUpstream[0]
	}
	bw.WriteString("X-Request-Id: ")
	bw.WriteString(r.RequestID)
	bw.WriteString("\r\nX-Dwara-Service: ")
	bw.WriteString(tg.HdrService[0])
	bw.WriteString("\r\nX-Dwara-Upstream: ")
	bw.WriteString(upstream)
	bw.WriteString("\r\nX-Dwara-Generation: ")
	bw.WriteString(tg.HdrGeneration[0])
	if m != nil {
		bw.WriteString("\r\nX-Dwara-Mirror: 1")
	}
	// X-Forwarded-For: the client's list (unless the client made it
	// hop-by-hop), then the peer.
	bw.WriteString("\r\nX-Forwarded-For: ")
	if !NamedIn(conn, "X-Forwarded-For") {
		for _, f := range r.fields {
			if f.name == "X-Forwarded-For" {
				bw.WriteString(cleanValue(f.value))
				bw.WriteString(", ")
			}
		}
	}
	bw.WriteString(r.ClientIP)
	bw.WriteString("\r\nX-Forwarded-Host: ")
	bw.WriteString(cleanValue(r.Host))
	if r.TLS {
		bw.WriteString("\r\nX-Forwarded-Proto: https\r\n")
	} else {
		bw.WriteString("\r\nX-Forwarded-Proto: http\r\n")
	}
	if r.Upgrade != "" {
		bw.WriteString("Connection: Upgrade\r\nUpgrade: ")
		bw.WriteString(cleanValue(r.Upgrade))
		bw.WriteString("\r\n")
	}
	switch {
	case r.Length > 0:
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), r.Length, 10))
		bw.WriteString("\r\n")
	case r.Length < 0:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
		if len(r.Trailers) > 0 {
			bw.WriteString("Trailer: ")
			for i, k := range r.Trailers {
				if i > 0 {
					bw.WriteString(", ")
				}
				bw.WriteString(k)
			}
			bw.WriteString("\r\n")
		}
	case r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH":
		bw.WriteString("Content-Length: 0\r\n")
	}
	bw.WriteString("\r\n")
}

// WriteField writes one header field line.
func WriteField(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(cleanValue(v))
	bw.WriteString("\r\n")
}

// cleanValue guards against a value that would split the header: every
// front refuses CR and LF in fields already, so this only matters for
// values built elsewhere; it allocates only then.
func cleanValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		return strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	return v
}

// gatewayField reports whether k is a field the gateway sets on every
// proxied request (X-Request-Id, X-Dwara-*), in any case: the client's own
// are never forwarded.
func gatewayField(k string) bool {
	return len(k) == len("X-Request-Id") && strings.EqualFold(k, "X-Request-Id") ||
		len(k) > 8 && strings.EqualFold(k[:8], "X-Dwara-")
}

// skipRequestHeader reports whether the client's field k is not forwarded
// as it is: the hop-by-hop fields (HTTP2-Settings among them, which an h2c
// upgrade sends: none is forwarded), the framing the proxy writes itself, the
// X-Forwarded-* fields it rewrites, and Expect (the proxy answers
// 100-continue itself by reading the body).
func skipRequestHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Http2-Settings",
		"Content-Length", "Host", "Expect",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return false
}

// NamedIn reports whether the Connection field values conn name the field
// k (case-insensitively), which makes k hop-by-hop. It does not allocate.
func NamedIn(conn []string, k string) bool {
	for _, v := range conn {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(tok), k) {
				return true
			}
		}
	}
	return false
}
