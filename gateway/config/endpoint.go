package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// metadataAddrs are cloud instance-metadata addresses that are not
// link-local themselves (AWS's IPv6 one).
var metadataAddrs = []netip.Addr{netip.MustParseAddr("fd00:ec2::254")}

// CheckAddress is the address policy of upstream endpoints, applied to
// every address written in a spec (by Validate) and to every address a
// data plane dials, after DNS resolution (DialControl): the unspecified
// address (0.0.0.0, ::, and their IPv4-mapped form), which means every
// address of the gateway's own host, is always refused; a link-local
// address (169.254.0.0/16, fe80::/10, where cloud metadata services
// answer) or a metadata address is refused unless allowLinkLocal.
func CheckAddress(a netip.Addr, allowLinkLocal bool) error {
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		return fmt.Errorf("%s is the unspecified address (every address of this host), not an endpoint", a)
	case allowLinkLocal:
		return nil
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || slices.Contains(metadataAddrs, a):
		return fmt.Errorf("%s is a link-local or metadata address; set allow_link_local: true on the upstream to allow it", a)
	}
	return nil
}

// DialControl returns a net.Dialer Control function that refuses, before
// connecting, an address CheckAddress refuses: it sees the address DNS
// resolved to, so a name that resolves to a metadata address is refused
// like the address itself.
func DialControl(allowLinkLocal bool) func(network, address string, c syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("dial %s: not an address", address)
		}
		if err := CheckAddress(ap.Addr(), allowLinkLocal); err != nil {
			return fmt.Errorf("dial %s: %w", address, err)
		}
		return nil
	}
}

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
