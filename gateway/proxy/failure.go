package proxy

import (
	"errors"
	"net"
	"net/http"
)

// failure is the answer to a request whose exchange failed before anything
// of an answer was written to the client: the one 499/502/504 decision of
// the forwarding path, whichever front parsed the request. A front only
// writes it (its problem+json, or nothing for 499).
type failure struct {
	// status is the status counted, and sent unless it is
	// statusClientGone (nothing is sent: the client went away).
	status        int
	title, detail string
	// close: the client's connection cannot be read any further (its
	// request body broke off), so it is closed after the answer.
	close bool
}

// exchangeFailure decides the answer to a request whose exchange on
// endpoint failed with err: 408 for a request body that stalled, 400 for
// one that cannot be read (the connection closed after either), 499 when
// the client went away (gone reports it; it is asked only when it
// matters), else 504 for an endpoint's timeout and 502 for any other
// failure, whose cause is logged with the request's id, service and
// upstream, never sent.
func (p *Proxy) exchangeFailure(err error, gone func() bool, rid, service, upstream, endpoint string) failure {
	if cbe, ok := errors.AsType[clientBodyError](err); ok {
		// Not the endpoint's failure: the client's body stalled (past the
		// stall timeout, which may also have ended the request's
		// context), does not parse (a bad chunk size, say), or ended
		// early, or the client went away while sending it.
		if ne, ok := errors.AsType[net.Error](cbe.err); ok && ne.Timeout() {
			return failure{status: http.StatusRequestTimeout, title: "Request body stalled", detail: "the request body stopped arriving", close: true}
		}
		if gone() {
			return failure{status: statusClientGone}
		}
		return failure{status: http.StatusBadRequest, title: "Bad request body", detail: "the request body could not be read", close: true}
	}
	if gone() {
		return failure{status: statusClientGone}
	}
	p.log.Warn("upstream request failed", "request_id", rid, "service", service,
		"upstream", upstream, "endpoint", endpoint, "err", err)
	f := failure{status: http.StatusBadGateway, title: "Upstream unreachable", detail: "the upstream endpoint could not be reached or failed"}
	if ne, ok := errors.AsType[net.Error](err); errors.Is(err, errUpstreamTimeout) || ok && ne.Timeout() {
		f.status, f.title, f.detail = http.StatusGatewayTimeout, "Upstream timeout", "the upstream endpoint did not answer in time"
	}
	return f
}
