package api

import (
	"crypto/sha256"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Anyone who can reach the API can make it refuse calls, and every refusal
// of a mutating call is an audit entry. So that nobody can fill the audit
// log (or the database's disk) by sending refused calls as fast as the
// network allows, refusals are rate-limited per remote address (a call
// over the limit is answered 429 and stored nowhere but in a counter), and
// a burst of identical refusals is one entry with a count.

// Rate of refusals per remote address, and the bounds of the state kept
// for it.
const (
	// refusalRate is the sustained rate of refused mutating calls one
	// remote address may make, per second.
	refusalRate = 5
	// refusalBurst is how many it may make at once.
	refusalBurst = 20
	// maxLimiters bounds the addresses tracked at once; past it, new
	// addresses share one limiter, so a flood from many (spoofed or
	// rotated) addresses is still limited and costs bounded memory.
	maxLimiters = 10_000
	// sweepEvery is the least time between two sweeps of idle limiters or
	// expired bursts; idleSweep is the most, when the sets are not full.
	sweepEvery = time.Second
	idleSweep  = time.Minute
	// burstWindow is how long identical refusals collapse into one entry,
	// counted from the first.
	burstWindow = 10 * time.Second
	// maxBursts bounds the bursts tracked at once; past it a refusal gets
	// an entry of its own.
	maxBursts = 10_000
)

// remoteKey is the address whose refusals are counted together: the IP
// address of remoteAddr (host:port), or its /64 for IPv6, where one host
// commonly has the whole prefix; remoteAddr itself when it has no IP.
func remoteKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// addrLimiter is the refusal limiter of one remote address.
type addrLimiter struct {
	lim     *rate.Limiter
	dropped uint64 // refusals answered 429 since the last entry written for the address
}

// limiterSet keeps a token bucket per remote address, at most max of them:
// one idle long enough to be full again is forgotten (it would allow the
// same as a new one), and when max addresses are busy, new ones share the
// overflow limiter. It is safe for concurrent use.
type limiterSet struct {
	limit     rate.Limit
	burst     int
	max       int
	mu        sync.Mutex
	m         map[string]*addrLimiter
	overflow  *addrLimiter
	lastSweep time.Time
}

// newLimiterSet returns a set of limiters of limit per second and burst,
// tracking at most max addresses.
func newLimiterSet(limit rate.Limit, burst, max int) *limiterSet {
	return &limiterSet{
		limit:    limit,
		burst:    burst,
		max:      max,
		m:        map[string]*addrLimiter{},
		overflow: &addrLimiter{lim: rate.NewLimiter(limit, burst)},
	}
}

// get returns the limiter of addr at now; the caller holds l.mu.
func (l *limiterSet) get(addr string, now time.Time) *addrLimiter {
	if a, ok := l.m[addr]; ok {
		return a
	}
	if (len(l.m) >= l.max || now.Sub(l.lastSweep) >= idleSweep) && now.Sub(l.lastSweep) >= sweepEvery {
		l.lastSweep = now
		for k, a := range l.m {
			if a.lim.TokensAt(now) >= float64(l.burst) {
				delete(l.m, k)
			}
		}
	}
	if len(l.m) >= l.max {
		return l.overflow
	}
	a := &addrLimiter{lim: rate.NewLimiter(l.limit, l.burst)}
	l.m[addr] = a
	return a
}

// allow takes one refusal of addr at now. When the address is over its
// rate it returns false, how long until it may be refused again, and
// whether this is the first refusal dropped since its last entry.
func (l *limiterSet) allow(addr string, now time.Time) (ok bool, wait time.Duration, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.get(addr, now)
	if a.lim.AllowN(now, 1) {
		return true, 0, false
	}
	a.dropped++
	missing := 1 - a.lim.TokensAt(now)
	if l.limit > 0 && !math.IsInf(float64(l.limit), 1) {
		wait = time.Duration(missing / float64(l.limit) * float64(time.Second))
	}
	return false, wait, a.dropped == 1
}

// takeDropped returns and resets how many refusals of addr were dropped
// since its last entry.
func (l *limiterSet) takeDropped(addr string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.m[addr]
	if !ok {
		return 0
	}
	n := a.dropped
	a.dropped = 0
	return n
}

// retryAfter formats a wait as whole seconds for Retry-After, at least 1.
func retryAfter(wait time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(wait.Seconds()))))
}

// burst is one audit entry that stands for identical refusals.
type burst struct {
	// written is closed once the first refusal's entry is written (or
	// could not be).
	written chan struct{}
	first   time.Time
	id      int64 // the entry's id; 0 when it could not be written
}

// collapser tracks the bursts of identical refusals of the last window,
// at most max of them. It is safe for concurrent use.
type collapser struct {
	window    time.Duration
	max       int
	mu        sync.Mutex
	m         map[[sha256.Size]byte]*burst
	lastSweep time.Time
}

func newCollapser(window time.Duration, max int) *collapser {
	return &collapser{window: window, max: max, m: map[[sha256.Size]byte]*burst{}}
}

// join returns the burst that a refusal with key joins at now. fresh is
// true when the refusal starts it: the caller writes its entry, sets id
// and closes written. b is nil when no burst can be tracked (too many):
// the refusal gets an entry of its own.
func (c *collapser) join(key [sha256.Size]byte, now time.Time) (b *burst, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.m[key]; ok && now.Sub(b.first) < c.window && !now.Before(b.first) {
		return b, false
	}
	if (len(c.m) >= c.max || now.Sub(c.lastSweep) >= idleSweep) && now.Sub(c.lastSweep) >= sweepEvery {
		c.lastSweep = now
		for k, b := range c.m {
			if now.Sub(b.first) >= c.window {
				delete(c.m, k)
			}
		}
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		return nil, true
	}
	b = &burst{written: make(chan struct{}), first: now}
	c.m[key] = b
	return b, true
}
