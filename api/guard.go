package api

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/dwara/dwara/api/apiv1"
)

// This file keeps web pages away from the API. A browser sends what any
// page asks it to, but it always says where it sends it (Host), and for a
// mutating request it says who asks (Origin, Sec-Fetch-Site) and what it
// sends (Content-Type): a page of another site may post a form
// (urlencoded, multipart or text/plain) without asking first, never JSON.
// DNS rebinding (a name of the attacker's that resolves to 127.0.0.1) makes
// such a page same-origin with the API, but its Host is still the
// attacker's name.

// hostRule is one entry of Options.AllowedHosts: a host name or IP address
// (canonical: lowercase, no trailing dot, IPv6 without brackets) and a
// port, "" for any.
type hostRule struct {
	host, port string
}

// String returns the rule as the operator wrote it (canonically).
func (h hostRule) String() string {
	host := h.host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if h.port == "" {
		return host
	}
	return host + ":" + h.port
}

// matches reports whether the rule allows host and port (port "" when the
// client named none, which matches a rule for any port and one for a
// default port, 80 or 443).
func (h hostRule) matches(host, port string) bool {
	if h.host != host {
		return false
	}
	switch {
	case h.port == "" || h.port == port:
		return true
	case port == "":
		return h.port == "80" || h.port == "443"
	}
	return false
}

// CheckAllowedHost reports whether entry is a valid entry of
// Options.AllowedHosts: a host name (letters, digits, '-', '_' and '.') or
// an IP address, with an optional :port (1..65535); an IPv6 address with a
// port in brackets. A URL, a path, a wildcard or white space is refused, with
// an error that says what is allowed.
func CheckAllowedHost(entry string) error {
	_, err := parseHostRule(entry)
	return err
}

// parseHostRule parses one entry of Options.AllowedHosts.
func parseHostRule(entry string) (hostRule, error) {
	bad := func(why string) (hostRule, error) {
		return hostRule{}, fmt.Errorf("allowed host %q: %s; want a host name or IP address with an optional :port, such as api.example.com or api.example.com:9090 or [fd00::1]:9090", entry, why)
	}
	if entry == "" {
		return bad("empty")
	}
	if strings.Contains(entry, "://") {
		return bad("a URL, not a host")
	}
	if strings.ContainsAny(entry, "/@*?# \t") {
		return bad("holds a character no host name has")
	}
	host, port, ok := splitHost(entry)
	if !ok || host == "" {
		return bad("not a host[:port]")
	}
	if net.ParseIP(host) == nil {
		for _, c := range host {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
				return bad("holds a character no host name has")
			}
		}
	}
	return hostRule{host: host, port: port}, nil
}

// splitHost splits a Host header value (or an Origin's host, or an
// AllowedHosts entry) into a canonical host (lowercase, no trailing dot,
// IPv6 without brackets or zone-less as written) and its port ("" when
// none). ok is false for a value that is no host[:port].
func splitHost(hostport string) (host, port string, ok bool) {
	hostport = strings.ToLower(strings.TrimSpace(hostport))
	switch {
	case hostport == "":
		return "", "", false
	case hostport[0] == '[':
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return "", "", false
		}
		host, rest := hostport[1:end], hostport[end+1:]
		if net.ParseIP(host) == nil {
			return "", "", false
		}
		if rest != "" {
			if rest[0] != ':' {
				return "", "", false
			}
			port = rest[1:]
		}
		hostport = host
	case strings.Count(hostport, ":") == 1:
		hostport, port, _ = strings.Cut(hostport, ":")
	case strings.Count(hostport, ":") > 1: // a bare IPv6 address
		if net.ParseIP(hostport) == nil {
			return "", "", false
		}
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return "", "", false
		}
	}
	host = strings.TrimSuffix(hostport, ".")
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	return host, port, host != ""
}

// isLoopbackName reports whether host (canonical, see splitHost) names
// this machine's loopback interface: localhost or a loopback IP address.
func isLoopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostAllowed reports whether the API answers to r's Host: a loopback name
// with any port, the IP address the listener was reached on, or one of
// Options.AllowedHosts.
func (s *Server) hostAllowed(r *http.Request) bool {
	host, port, ok := splitHost(r.Host)
	if !ok {
		return false
	}
	if isLoopbackName(host) {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if la, ok := local.(*net.TCPAddr); ok && la.IP.Equal(ip) {
				return true
			}
		}
	}
	return slices.ContainsFunc(s.hosts, func(h hostRule) bool { return h.matches(host, port) })
}

// hostNames describes where the API answers, for the 421 problem.
func (s *Server) hostNames() string {
	names := "loopback names (localhost, 127.0.0.1, [::1]) and the address the listener was reached on"
	if len(s.hosts) > 0 {
		var list []string
		for _, h := range s.hosts {
			list = append(list, h.String())
		}
		names += " and " + strings.Join(list, ", ")
	}
	return names
}

// checkHost answers 421 Misdirected Request to a request whose Host the
// API does not answer to (see hostAllowed).
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r) {
			note(r, "host", r.Host)
			s.writeProblem(w, r, problemf(http.StatusMisdirectedRequest,
				"the API answers only on %s; this request was addressed to Host %q; set --admin-host to add a name",
				s.hostNames(), r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// mutatingMethods are the methods a browser sends only with the page's
// Origin and that change state.
var mutatingMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// acceptedTypes lists, for a problem, the media types a mutating call may
// be sent with.
const acceptedTypes = "application/json (or another +json type), application/yaml, application/x-yaml or text/yaml"

// checkMutation refuses a mutating call that a web page of another site
// could have sent: 403 when Sec-Fetch-Site says cross-site or same-site,
// or when an Origin is present that is neither the listener's own origin
// (its host and port those of the Host header) nor one of
// Options.AllowedHosts; 415 when its Content-Type is not JSON or YAML,
// even for an empty body (a form is never JSON). Other methods pass.
func (s *Server) checkMutation(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(mutatingMethods, r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		if p := s.crossSiteProblem(r); p != nil {
			s.writeProblem(w, r, p)
			return
		}
		mt, err := mediaType(r)
		if err != nil || !(isJSONType(mt) || slices.Contains(yamlTypes, mt)) {
			if err == nil {
				note(r, "content_type", mt)
			}
			s.writeProblem(w, r, unsupported(r, acceptedTypes))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// crossSiteProblem is the 403 Problem of a mutating call sent on behalf of
// another site, nil for one that is not.
func (s *Server) crossSiteProblem(r *http.Request) *apiv1.Problem {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "cross-site", "same-site":
		note(r, "sec_fetch_site", site)
		return fieldProblem(http.StatusForbidden, "Sec-Fetch-Site",
			"is %s: a web page of another origin may not change anything; call the API from its own origin or from a client that is not a browser", site)
	}
	origin := r.Header.Values("Origin")
	if len(origin) == 0 {
		return nil
	}
	if len(origin) == 1 && s.originAllowed(r, origin[0]) {
		return nil
	}
	note(r, "origin", strings.Join(origin, ", "))
	return fieldProblem(http.StatusForbidden, "Origin",
		"is %q: a mutating call may come only from the API's own origin (%s://%s) or an allowed host (%s)",
		strings.Join(origin, ", "), scheme(r), r.Host, s.hostNames())
}

// originAllowed reports whether origin is the listener's own (scheme
// http or https, host and port those of r's Host, a default port matching
// an absent one) or names one of Options.AllowedHosts.
func (s *Server) originAllowed(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	oh, op, ok := splitHost(u.Host)
	if !ok {
		return false
	}
	if op == "" {
		op = defaultPort(u.Scheme)
	}
	rh, rp, ok := splitHost(r.Host)
	if ok && oh == rh && (op == rp || rp == "" && op == defaultPort(u.Scheme)) {
		return true
	}
	return slices.ContainsFunc(s.hosts, func(h hostRule) bool { return h.matches(oh, op) })
}

// defaultPort is the port of a URL scheme without one.
func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// scheme is the scheme r arrived by.
func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// isJSONType reports whether mt is application/json or a +json type.
func isJSONType(mt string) bool {
	return mt == contentJSON || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}
