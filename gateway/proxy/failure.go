package proxy

import (
	"errors"
	"net"
	"strconv"
)

// Failure is the answer to a request whose exchange failed before anything
// of an answer was written to the client: the one 499/502/504 decision of
// the forwarding path, whichever front parsed the request. A front only
// writes it (its problem+json, or nothing for 499).
type Failure struct {
	// Status is the status counted, and sent unless it is
	// StatusClientGone (nothing is sent: the client went away).
	Status        int
	Title, Detail string
	// Close: the client's connection cannot be read any further (its
	// request body broke off), so it is closed after the answer.
	Close bool
}

// ExchangeFailure decides the answer to a request whose exchange on
// endpoint failed with err: 408 for a request body that stalled, 400 for
// one that cannot be read (the connection closed after either), 499 when
// the client went away (gone reports it; it is asked only when it
// matters), else 504 for an endpoint's timeout and 502 for any other
// failure, whose cause is logged with the request's id, service and
// upstream, never sent.
func (p *Proxy) ExchangeFailure(err error, gone func() bool, rid, service, upstream, endpoint string) Failure {
	if cbe, ok := errors.AsType[clientBodyError](err); ok {
		// Not the endpoint's failure: the client's body stalled (past the
		// stall timeout, which may also have ended the request's
		// context), does not parse (a bad chunk size, say), or ended
		// early, or the client went away while sending it.
		if ne, ok := errors.AsType[net.Error](cbe.err); ok && ne.Timeout() {
			return Failure{Status: statusRequestTimeout, Title: "Request body stalled", Detail: "the request body stopped arriving", Close: true}
		}
		if gone() {
			return Failure{Status: StatusClientGone}
		}
		return Failure{Status: statusBadRequest, Title: "Bad request body", Detail: "the request body could not be read", Close: true}
	}
	if gone() {
		return Failure{Status: StatusClientGone}
	}
	p.log.Warn("upstream request failed", "request_id", rid, "service", service,
		"upstream", upstream, "endpoint", endpoint, "err", err)
	f := Failure{Status: statusBadGateway, Title: "Upstream unreachable", Detail: "the upstream endpoint could not be reached or failed"}
	if ne, ok := errors.AsType[net.Error](err); errors.Is(err, ErrUpstreamTimeout) || ok && ne.Timeout() {
		f.Status, f.Title, f.Detail = statusGatewayTimeout, "Upstream timeout", "the upstream endpoint did not answer in time"
	}
	return f
}

// ProblemJSON is the body of an RFC 9457 problem+json answer.
func ProblemJSON(status int, title, detail string) string {
	return `{"type":"about:blank","title":` + strconv.Quote(title) +
		`,"status":` + strconv.Itoa(status) + `,"detail":` + strconv.Quote(detail) + `}`
}
