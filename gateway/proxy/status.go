package proxy

// The HTTP status codes and methods the core decides with, so that it
// imports no HTTP server library (RFC 9110's registry; the fronts map
// them to their servers' own).
const (
	StatusBadRequest         = 400
	StatusNotFound           = 404
	StatusMethodNotAllowed   = 405
	StatusRequestTimeout     = 408
	StatusNotImplemented     = 501
	StatusBadGateway         = 502
	StatusServiceUnavailable = 503
	StatusGatewayTimeout     = 504
)

const (
	methodGet     = "GET"
	methodHead    = "HEAD"
	methodOptions = "OPTIONS"
	methodTrace   = "TRACE"
	methodConnect = "CONNECT"
)
