package proxy

// The HTTP status codes and methods the core decides with, so that it
// imports no HTTP server library (RFC 9110's registry; the fronts map
// them to their servers' own).
const (
	statusBadRequest       = 400
	statusNotFound         = 404
	statusMethodNotAllowed = 405
	statusRequestTimeout   = 408
	statusNotImplemented   = 501
	statusBadGateway       = 502
	statusGatewayTimeout   = 504
)

const (
	methodGet     = "GET"
	methodHead    = "HEAD"
	methodOptions = "OPTIONS"
	methodTrace   = "TRACE"
	methodConnect = "CONNECT"
)
