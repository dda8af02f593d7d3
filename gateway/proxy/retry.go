package proxy

import (
	"errors"
	"syscall"
	"time"
)

// Retries: a request on the forwarding path that fails before any answer
// header, and before anything was written to the client, is sent again to
// another endpoint of the same upstream when
//
//   - it cannot have reached the endpoint (the connect was refused or timed
//     out, or nothing of it was written), whatever its method; or it may
//     have reached it (any of it was written and no header came back, the
//     connection closed or the response-header timeout passed) but is safe
//     to send twice: a GET, HEAD, OPTIONS or TRACE without a body. PUT and DELETE are idempotent by RFC 9110 too, but
//     an application's handlers often are not in practice (a second DELETE
//     answers 404, audit trails record two calls); Go's http.Transport
//     draws the same line;
//   - an endpoint of the upstream is up and was not tried for this
//     request (each endpoint at most once: a request tries at most every
//     endpoint of its upstream);
//   - the upstream's retry budget allows it: its retry attempts still in
//     flight stay below retryBudgetPercent of its requests in flight, or
//     below minRetryConcurrency, whichever is more. A retry holds its share
//     of the budget until its request ends. When a whole upstream fails,
//     retries therefore add at most that share to the load instead of
//     multiplying it.
//
// The retry goes to the untried endpoint that is up with the fewest
// requests in flight. Each retry is counted in
// dwara_upstream_retries_total{upstream}. Upgrades are not retried (a
// tunnel is no request to send twice); https endpoints are, as http ones.

// The retry budget of an upstream (in the manner of Envoy's retry budgets).
const (
	// retryBudgetPercent is the share of an upstream's requests in flight
	// that retry attempts in flight may reach.
	retryBudgetPercent = 20
	// minRetryConcurrency is how many retry attempts may be in flight
	// whatever the share. When an endpoint dies, the requests in flight on
	// it fail at once and want their retries at once: with one endpoint of
	// two gone, about half the upstream's requests in flight, far above
	// the 20% share while few are in flight. A floor of 10 lets an
	// upstream with up to about 20 requests in flight lose one endpoint of
	// two without failing a request; with Envoy's default floor of 3,
	// TestKillOneOfTwoUnderLoad (8 clients) lost requests. From 50
	// requests in flight on, the share rules.
	minRetryConcurrency = 10
)

// Attempt is where one request is being served: the target and its
// endpoint, when its exchange began there, the endpoints of the target's
// upstream tried so far and the retries it holds of that upstream's
// budget. A front begins it with Route.Begin and keeps it with its
// request (on its stack, or in its pooled exchange); it ends with End,
// in the front's deferred bookkeeping. The zero value is not usable.
type Attempt struct {
	// Target is the target serving the request: the routed one, or the
	// one it failed over to (failover).
	Target *Target
	// Endpoint is the endpoint of Target serving the request, or the last
	// one tried.
	Endpoint *Endpoint
	began    time.Time
	tried    uint64 // bit i: the upstream's endpoints[i] was tried
	held     int64  // retry attempts taken from the upstream's budget
	// walk is the split's walk, for failover; its svc is nil for a
	// request that does not fail over (a forced target).
	walk splitWalk
	// reached: a failure on Target may have reached one of its endpoints
	// (it was not a refused or timed-out connect), so the request does not
	// fail over to another target.
	reached bool
	// cx is the response cache's part of the exchange (cache.go); its tc
	// is nil when the service has no cache.
	cx cacheExchange
}

// newAttempt begins an exchange on ep at now, on no target: Route.Begin's
// start.
func newAttempt(ep *Endpoint, now time.Time) Attempt {
	return Attempt{Endpoint: ep, began: ep.state.BeginAt(now), tried: 1 << ep.index}
}

// moveTo ends the failed exchange on a.ep (in flight, latency as a failure)
// and begins one on next.
func (a *Attempt) moveTo(next *Endpoint) {
	a.Endpoint.state.Done(a.began, true)
	a.Endpoint, a.began = next, next.state.Begin()
	a.tried |= 1 << next.index
}

// end ends the exchange on a.ep, failed or not, and gives the retries it
// holds back to u's budget.
func (a *Attempt) end(u *upstream, failed bool, now time.Time) {
	a.Endpoint.state.DoneAt(a.began, now, failed)
	if a.held > 0 {
		u.shared.retries.Add(-a.held)
		a.held = 0
	}
}

// retryTarget returns the endpoint of u to send r to again after the
// exchange x on a.ep failed with err, or nil when r is not to be retried
// (see the rules above). A non-nil result has taken one retry from u's
// budget, held by a until it ends, and is counted.
func (p *Proxy) retryTarget(r *Request, u *upstream, a *Attempt, x Exchange, err error) *Endpoint {
	if r.Upgrade != "" || x.sent || x.mayHaveArrived() && !r.replayable() {
		return nil
	}
	next := u.untried(a.tried)
	if next == nil || !u.takeRetry() {
		return nil
	}
	a.held++
	u.shared.retried.Inc()
	return next
}

// failover moves a, whose request q failed with no connection made on
// every endpoint of a.Target's upstream that is up (each refused the
// connection or did not accept it within the connect timeout, so the
// request reached none of them), to the next target of the split by the
// same walk as route's failover, excluding the targets already left; it
// returns the endpoint to send q to there, or nil when q does not fail
// over: a forced target, an upgrade, a failure that may have reached an
// endpoint, an endpoint of the target that is up and untried (the retry
// budget said no), no other target with an endpoint up, or that target's
// upstream's retry budget spent. A move is counted in the failed target's
// dwara_split_failovers_total and recorded as an error of its version
// (its canary recorder, in a canary group: a dead canary is rolled back
// as before, though its clients are served); the retries a held of the
// old upstream's budget go back to it, and the move takes one of the new
// upstream's.
func (p *Proxy) failover(q *Request, a *Attempt) *Endpoint {
	w := &a.walk
	if w.svc == nil || a.reached || q.Upgrade != "" || a.Target.Up.untried(a.tried) != nil {
		return nil
	}
	excluded := w.excluded | 1<<w.ti
	for {
		ti := w.sp.PickExcluding(w.hash, excluded)
		if ti < 0 {
			return nil
		}
		tg := w.svc.targets[ti]
		ei := tg.Up.balancer.Pick(w.affinityKey)
		if ei < 0 {
			excluded |= 1 << ti
			continue
		}
		if !tg.Up.takeRetry() {
			return nil
		}
		a.Target.failovers.Inc()
		if rec := a.Target.rec; rec != nil {
			rec.Observe(time.Since(a.began), true)
		}
		if a.held > 0 {
			a.Target.Up.shared.retries.Add(-a.held)
		}
		next := tg.Up.endpoints[ei]
		a.Endpoint.state.Done(a.began, true)
		a.Target, a.Endpoint, a.began = tg, next, next.state.Begin()
		a.tried, a.held, a.reached = 1<<next.index, 1, false
		w.ti, w.excluded = ti, excluded
		return next
	}
}

// connectFailed reports whether the exchange x failed with no connection
// made: the connect was refused, or did not finish within the connect
// timeout. Such a request reached nothing.
func connectFailed(x Exchange, err error) bool {
	return x.Conn == nil && (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrUpstreamTimeout))
}

// safeMethod reports whether method is safe (RFC 9110 section 9.2.1), and
// so may be sent twice.
func safeMethod(method string) bool {
	switch method {
	case methodGet, methodHead, methodOptions, methodTrace:
		return true
	}
	return false
}

// untried returns the endpoint of u not in tried that is up and has the
// fewest requests in flight (the first such in spec order on a tie), or
// nil.
func (u *upstream) untried(tried uint64) *Endpoint {
	var best *Endpoint
	var least int64
	for i, e := range u.endpoints {
		if tried&(1<<i) != 0 || !e.state.Up() {
			continue
		}
		if n := e.state.Inflight(); best == nil || n < least {
			best, least = e, n
		}
	}
	return best
}

// takeRetry takes one retry from u's budget and reports whether the budget
// allowed it: retries in flight below retryBudgetPercent of the requests in
// flight on u's endpoints, or below minRetryConcurrency.
func (u *upstream) takeRetry() bool {
	var inflight int64
	for _, e := range u.endpoints {
		inflight += e.state.Inflight()
	}
	limit := max(inflight*retryBudgetPercent/100, minRetryConcurrency)
	for {
		n := u.shared.retries.Load()
		if n >= limit {
			return false
		}
		if u.shared.retries.CompareAndSwap(n, n+1) {
			return true
		}
	}
}
