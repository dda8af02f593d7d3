// Package affinity mints and reads the handles of sticky sessions.
//
// When a service has sticky sessions, the key of the weighted pick is the
// value of its affinity cookie. A request without a valid cookie gets a fresh
// handle from MintInto before the pick, so a session's first request lands on the
// same target as all its later ones; the proxy sets the handle on that first
// response and never re-sets it while the client presents it.
//
// A handle is 24 lowercase hex characters: the unix time in milliseconds (12
// digits) followed by a per-process counter (12 digits, wrapping) that starts
// at a random value, so two processes minting in the same millisecond do not
// hand out the same handles. Valid checks that shape; a cookie of any other
// shape is replaced by a fresh handle. ReadCookie finds the cookie in the
// request headers. None of them allocates (MintInto writes into the caller's
// array), and all are safe for concurrent use.
package affinity

import (
	"crypto/rand"
	"encoding/binary"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// IDLen is the length of a handle: 12 hex digits of unix milliseconds and 12
// of the process counter.
const IDLen = 24

// counter is the per-process counter of MintInto. It starts at a random 48-bit
// value so that two processes minting in the same millisecond do not hand out
// the same handles.
var counter atomic.Uint64

func init() {
	var b [8]byte
	_, _ = rand.Read(b[:])
	counter.Store(binary.LittleEndian.Uint64(b[:]))
}

const hexDigits = "0123456789abcdef"

// MintInto writes a fresh handle into b: IDLen lowercase hex characters,
// the unix time in milliseconds (12 digits) followed by the process-wide
// counter (12 digits, wrapping). The caller makes it part of the string it
// needs (the proxy: the Set-Cookie value, in one allocation). Safe for
// concurrent use.
func MintInto(b *[IDLen]byte) {
	putHex48(b[:12], uint64(time.Now().UnixMilli()))
	putHex48(b[12:], counter.Add(1))
}

// putHex48 writes the low 48 bits of v as 12 lowercase hex digits into dst.
func putHex48(dst []byte, v uint64) {
	for i := 11; i >= 0; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// Valid reports whether v has the shape of a minted handle: exactly IDLen
// lowercase hex characters. It does not allocate.
func Valid(v string) bool {
	if len(v) != IDLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ReadCookie returns the value of the first cookie called name across all
// Cookie header lines of h, in order, and whether there was one. Pairs
// without "=" or with an empty name are skipped, and an empty name is never
// found; the value is trimmed of spaces and tabs and of one pair of
// surrounding double quotes. It does not allocate.
func ReadCookie(h http.Header, name string) (string, bool) {
	return ReadCookieLines(h["Cookie"], name)
}

// ReadCookieLines is ReadCookie over the Cookie field lines themselves, for
// a request parsed by something other than net/http. It does not allocate.
func ReadCookieLines(lines []string, name string) (string, bool) {
	for _, line := range lines {
		for len(line) > 0 {
			var pair string
			if i := strings.IndexByte(line, ';'); i >= 0 {
				pair, line = line[:i], line[i+1:]
			} else {
				pair, line = line, ""
			}
			eq := strings.IndexByte(pair, '=')
			if eq < 0 {
				continue
			}
			if strings.Trim(pair[:eq], " \t") != name || name == "" {
				continue
			}
			v := strings.Trim(pair[eq+1:], " \t")
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v, true
		}
	}
	return "", false
}
