package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// ParseEndpoint parses an upstream endpoint as written in a spec: host:port,
// http://host:port or https://host:port, optionally followed by a single "/".
// The host is a DNS name, an IPv4 address or an IPv6 address in brackets; the
// port is 1..65535. Paths, queries, fragments and userinfo are refused.
//
// The result holds only Scheme ("http" when none was written) and Host, with
// the host lowercased and the port in canonical decimal, so two spellings of
// one endpoint give equal URLs. It is a fresh value on every call.
func ParseEndpoint(s string) (*url.URL, error) {
	scheme, rest := "http", s
	if before, after, ok := strings.Cut(s, "://"); ok {
		switch before {
		case "http", "https":
			scheme, rest = before, after
		default:
			return nil, fmt.Errorf("endpoint %s: scheme must be http or https", quote(s))
		}
	}
	rest = strings.TrimSuffix(rest, "/")
	switch {
	case strings.Contains(rest, "@"):
		return nil, fmt.Errorf("endpoint %s: must not contain userinfo", quote(s))
	case strings.Contains(rest, "?"):
		return nil, fmt.Errorf("endpoint %s: must not have a query", quote(s))
	case strings.Contains(rest, "#"):
		return nil, fmt.Errorf("endpoint %s: must not have a fragment", quote(s))
	case strings.Contains(rest, "/"):
		return nil, fmt.Errorf("endpoint %s: must not have a path other than \"/\"", quote(s))
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) && ae.Err == "too many colons in address" {
			return nil, fmt.Errorf("endpoint %s: write IPv6 addresses in brackets, as [::1]:8080", quote(s))
		}
		return nil, fmt.Errorf("endpoint %s: must be host:port or http(s)://host:port", quote(s))
	}
	n, err := strconv.Atoi(port)
	if err != nil || !isDigits(port) || n < 1 || n > 65535 {
		return nil, fmt.Errorf("endpoint %s: port must be 1..65535", quote(s))
	}
	if host == "" {
		return nil, fmt.Errorf("endpoint %s: host is empty", quote(s))
	}
	host = strings.ToLower(host)
	bracketed := strings.HasPrefix(rest, "[")
	addr, ipErr := netip.ParseAddr(host)
	switch {
	case bracketed && (ipErr != nil || !addr.Is6() || addr.Zone() != ""):
		return nil, fmt.Errorf("endpoint %s: only an IPv6 address without zone may stand in brackets", quote(s))
	case ipErr == nil && addr.Is4():
	case ipErr == nil && addr.Is6() && bracketed:
	case !isHostname(host):
		return nil, fmt.Errorf("endpoint %s: host must be a DNS name or an IP address", quote(s))
	}
	return &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(n))}, nil
}

// isHostname is isDNSName that also allows '_', which internal service names
// sometimes carry.
func isHostname(h string) bool {
	return isDNSName(strings.ReplaceAll(h, "_", "x"))
}
