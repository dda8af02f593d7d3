package split

import (
	"crypto/rand"
	"encoding/binary"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// AffinityIDLen is the length of a minted affinity handle.
const AffinityIDLen = 24

// affinityCounter is the per-process counter of MintAffinityID. It starts at
// a random 48-bit value so that two processes minting in the same millisecond
// do not hand out the same handles.
var affinityCounter atomic.Uint64

func init() {
	var b [8]byte
	_, _ = rand.Read(b[:])
	affinityCounter.Store(binary.LittleEndian.Uint64(b[:]))
}

const hexDigits = "0123456789abcdef"

// MintAffinityID returns a fresh affinity handle: 24 lowercase hex characters,
// the unix time in milliseconds (12 digits) followed by a process-wide counter
// (12 digits, wrapping). Safe for concurrent use.
func MintAffinityID() string {
	var b [AffinityIDLen]byte
	putHex48(b[:12], uint64(time.Now().UnixMilli()))
	putHex48(b[12:], affinityCounter.Add(1))
	return string(b[:])
}

func putHex48(dst []byte, v uint64) {
	for i := 11; i >= 0; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// ValidAffinityID reports whether v has the shape of a minted handle:
// exactly 24 lowercase hex characters.
func ValidAffinityID(v string) bool {
	if len(v) != AffinityIDLen {
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
// Cookie header lines of h, in order. Pairs without "=" or with an empty name
// are skipped; the value is trimmed of spaces and tabs and of one pair of
// surrounding double quotes. It does not allocate.
func ReadCookie(h http.Header, name string) (string, bool) {
	for _, line := range h["Cookie"] {
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
