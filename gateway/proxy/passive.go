package proxy

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/gateway/config"
)

// Passive checks judge endpoints by the requests the proxy sends them, on
// every upstream, whether or not it declares health_check.
//
// A transport failure is a request that got no answer header from the
// endpoint: a refused or timed-out connect, a reset or an end of the
// connection before the header (on a new connection: a pooled one the
// endpoint closed while idle does not count), a response-header timeout,
// a malformed answer. passive.consecutive_failures of them in a row
// (default config.DefaultPassiveConsecutiveFailures) eject the endpoint;
// with passive.consecutive_5xx set, that many 5xx answers in a row do too.
// An ejected endpoint is not up (balance.State.Up), so the balancers skip
// it, for balance.EjectionBase, doubled at each ejection that follows
// another without a success in between, at most balance.EjectionMax. When
// the time is up it receives requests again; a success (an answer header,
// not a 5xx when 5xx answers count) ends the history, a failure ejects it
// again for twice as long. The ejection state lives in the endpoint's
// balance.State beside the active checks' verdict, and the endpoint is up
// only while neither holds it out.
//
// The cap: passive checks never eject more than maxEjectionPercent of an
// upstream's endpoints, and never the last endpoint of an upstream that is
// up; an upstream of one endpoint is never ejected. A failure of the whole
// upstream therefore still reaches the clients as 502 or 504 answers, and
// only the active checks can take a whole target out (and make the split
// fail over). The cap is kept in every upstream that names the endpoint's
// address, since they share its state. Ejection decisions, rare by nature,
// are serialised by one mutex; the per-request work is a few atomic loads
// on the endpoint's state.
//
// https endpoints are judged as http ones: their pools dial TLS, and a
// failed handshake is a failed connect. Upgrades are judged alike, but
// not retried.

// maxEjectionPercent is the largest share of an upstream's endpoints that
// passive checks may hold ejected at once (rounded down: 1 of 2 or 3, 2 of
// 4 or 5).
const maxEjectionPercent = 50

// passiveSettings are an upstream's passive-check thresholds.
type passiveSettings struct {
	failures int // transport failures in a row that eject an endpoint
	fiveXX   int // 5xx answers in a row that eject an endpoint; 0: not counted
}

// passiveOf returns the settings of an upstream's passive block (nil: the
// defaults).
func passiveOf(pc *config.Passive) passiveSettings {
	s := passiveSettings{failures: config.DefaultPassiveConsecutiveFailures}
	if pc != nil {
		if pc.ConsecutiveFailures > 0 {
			s.failures = pc.ConsecutiveFailures
		}
		s.fiveXX = max(pc.Consecutive5xx, 0)
	}
	return s
}

// upstreamShared is what the proxy keeps of one upstream across
// generations: the retry budget's count of retries in flight, and the
// upstream's retry, ejection and protocol error counters (the last
// shared by the protocol watches of its endpoints' pools). Safe for
// concurrent use.
type upstreamShared struct {
	// retries counts the retry attempts of requests still in flight.
	retries   atomic.Int64
	retried   lazyCounter
	ejections lazyCounter
	protocol  protocolCounters
	// labels are the label values of its series (upstreamShared.init).
	labels [1 + numReasons][2]string
}

// upstreamMetrics are the collectors of the passive checks and retries.
// Their series are the upstreamShared's, made on first use (series.go).
type upstreamMetrics struct {
	retries   *prometheus.CounterVec
	ejections *prometheus.CounterVec
	// protocol counts endpoint connections closed for what their endpoint
	// sent outside an answer's frame (upcheck.go).
	protocol *prometheus.CounterVec
	// upstreams are the upstreamShared (Proxy.shared) whose series the
	// collectors expose.
	upstreams *liveSet[*upstreamShared]
}

func newUpstreamMetrics(reg prometheus.Registerer) upstreamMetrics {
	m := upstreamMetrics{
		retries: counterVec("dwara_upstream_retries_total",
			"Requests sent again to another endpoint of the upstream after a failure before any answer header.",
			"upstream"),
		ejections: counterVec("dwara_upstream_ejections_total",
			"Endpoints of the upstream taken out of rotation by the passive checks.",
			"upstream"),
		protocol: counterVec("dwara_upstream_protocol_errors_total",
			"Endpoint connections closed for bytes outside an answer's frame, by reason: extra_bytes (past an answer's end: a HEAD, 204 or 304 with a body, bytes after the last chunk or the Content-Length), unsolicited (bytes on an idle connection), head_too_large (an answer head over 16 KiB, answered 502).",
			"upstream", "reason"),
		upstreams: new(liveSet[*upstreamShared]),
	}
	if reg != nil {
		family := func(vec *prometheus.CounterVec, series func(*upstreamShared, func(seriesMetric))) prometheus.Collector {
			return lazyFamily[*upstreamShared]{vec: vec, zero: zeroCounter(vec), live: m.upstreams, series: series}
		}
		reg.MustRegister(
			family(m.retries, func(s *upstreamShared, yield func(seriesMetric)) { yield(&s.retried) }),
			family(m.ejections, func(s *upstreamShared, yield func(seriesMetric)) { yield(&s.ejections) }),
			family(m.protocol, func(s *upstreamShared, yield func(seriesMetric)) {
				for r := range s.protocol {
					yield(&s.protocol[r])
				}
			}))
	}
	return m
}

// upstreamShared returns the shared state of the upstream name, creating
// it on first use. Called under applyMu.
func (p *Proxy) upstreamShared(name string) *upstreamShared {
	if p.shared == nil {
		p.shared = make(map[string]*upstreamShared)
	}
	s := p.shared[name]
	if s == nil {
		s = &upstreamShared{}
		s.labels[0][0] = name
		s.retried.init(p.um.retries, s.labels[0][:1])
		s.ejections.init(p.um.ejections, s.labels[0][:1])
		for r := range numReasons {
			s.labels[1+r] = [2]string{name, reasonNames[r]}
			s.protocol[r].init(p.um.protocol, s.labels[1+r][:])
		}
		p.shared[name] = s
		p.um.upstreams.changed()
	}
	return s
}

// retainShared forgets the shared state and deletes the series of the
// upstreams t no longer has. Called under applyMu.
func (p *Proxy) retainShared(t *Table) {
	if ch := t.changed; ch != nil && len(ch.fresh)+len(ch.gone) <= len(t.upstreams)/4 {
		// Only an upstream gone from the table served before may be gone.
		for _, u := range ch.gone {
			if _, ok := t.upstreams[u.name]; !ok {
				p.dropShared(u.name)
			}
		}
		return
	}
	for name := range p.shared {
		if _, ok := t.upstreams[name]; !ok {
			p.dropShared(name)
		}
	}
}

// dropShared forgets the shared state of upstream name and deletes its
// series. Called under applyMu.
func (p *Proxy) dropShared(name string) {
	s := p.shared[name]
	if s == nil {
		return
	}
	delete(p.shared, name)
	p.um.upstreams.changed()
	s.retried.drop()
	s.ejections.drop()
	for r := range s.protocol {
		s.protocol[r].drop()
	}
}

// linkPeers sets every endpoint's peers: the upstreams of t that name its
// address. With prev, the table served before t, it sets only those of
// the addresses that t's changed upstreams name (all of them when most
// upstreams changed). An endpoint carried over from prev may be ejected
// while this runs: its peers are written under ejectMu, which mayEject
// reads them under.
func (p *Proxy) linkPeers(t, prev *Table) {
	p.ejectMu.Lock()
	defer p.ejectMu.Unlock()
	ch := t.changed
	if prev == nil || ch == nil || prev.peers == nil || len(ch.fresh)+len(ch.gone) > len(t.upstreams)/4 {
		n := 0
		for _, u := range t.upstreamOrder {
			n += len(u.endpoints)
		}
		t.peers = make(map[string][]*upstream, n)
		for _, u := range t.upstreamOrder {
			for _, e := range u.endpoints {
				t.peers[e.Addr] = append(t.peers[e.Addr], u)
			}
		}
		for _, u := range t.upstreamOrder {
			for _, e := range u.endpoints {
				e.peers = t.peers[e.Addr]
			}
		}
		return
	}
	if len(ch.fresh) == 0 && len(ch.gone) == 0 {
		t.peers = prev.peers
		return
	}
	// The map is prev's, changed in place: only the compiles read it
	// (under applyMu), and prev's is not read again once t's is made.
	// Its lists are shared with the endpoints: each changed one is
	// replaced by a new slice, never written in place.
	t.peers = prev.peers
	touched := map[string]bool{}
	for _, u := range ch.gone {
		for _, e := range u.endpoints {
			if !touched[e.Addr] {
				t.peers[e.Addr] = slices.Clone(t.peers[e.Addr])
				touched[e.Addr] = true
			}
			t.peers[e.Addr] = slices.DeleteFunc(t.peers[e.Addr], func(v *upstream) bool { return v == u })
			if len(t.peers[e.Addr]) == 0 {
				delete(t.peers, e.Addr)
			}
		}
	}
	for _, u := range ch.fresh {
		for _, e := range u.endpoints {
			if !touched[e.Addr] {
				t.peers[e.Addr] = slices.Clone(t.peers[e.Addr])
				touched[e.Addr] = true
			}
			t.peers[e.Addr] = append(t.peers[e.Addr], u)
		}
	}
	for addr := range touched {
		for _, u := range t.peers[addr] {
			for _, e := range u.endpoints {
				if e.Addr == addr {
					e.peers = t.peers[addr]
				}
			}
		}
	}
}

// Answered records an answer header with status code from ep, an endpoint
// of u: a success, or with passive.consecutive_5xx set and a 5xx code, one
// more 5xx in a row.
func (p *Proxy) Answered(u *upstream, ep *Endpoint, code int) {
	if code >= 500 && u.passive.fiveXX > 0 {
		if n := ep.state.Passive5xx(); n >= u.passive.fiveXX {
			p.eject(u, ep, n, "consecutive 5xx answers")
		}
		return
	}
	ep.state.PassiveOK()
}

// transportFailed records a transport failure err of ep, an endpoint of u.
func (p *Proxy) transportFailed(u *upstream, ep *Endpoint, err error) {
	if n := ep.state.PassiveFailure(); n >= u.passive.failures {
		p.eject(u, ep, n, err)
	}
}

// eject ejects ep after a streak of n failures (reason: the last error, or
// what the streak was) unless it is ejected already or the cap forbids it,
// and logs and counts the ejection.
func (p *Proxy) eject(u *upstream, ep *Endpoint, n int, reason any) {
	p.ejectMu.Lock()
	ok := ep.mayEject()
	var d time.Duration
	if ok {
		d, ok = ep.state.Eject()
	}
	p.ejectMu.Unlock()
	if !ok {
		return
	}
	u.shared.ejections.Inc()
	p.log.Warn("passive check: endpoint ejected", "upstream", u.name, "endpoint", ep.Addr,
		"reason", reason, "failures", n, "for", d)
}

// mayEject reports whether the cap allows ejecting ep: in every upstream
// naming its address, another endpoint stays up, and at most
// maxEjectionPercent of the endpoints would be ejected. Called under
// ejectMu, which makes the check and the ejection one step.
func (ep *Endpoint) mayEject() bool {
	for _, u := range ep.peers {
		ejected, othersUp := 0, false
		for _, e := range u.endpoints {
			switch {
			case e.state == ep.state:
			case e.state.Ejected():
				ejected++
			case e.state.Up():
				othersUp = true
			}
		}
		if !othersUp || (ejected+1)*100 > len(u.endpoints)*maxEjectionPercent {
			return false
		}
	}
	return true
}
