package proxy

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
)

// The fronts live in packages that import this one, so this package's
// own tests reach them through these hooks, which fronts_ext_test.go (an
// external test package, linked into the same test binary) sets in its
// init from gateway/proxy/front, fastfront and httpfront.
var (
	// NewFastServerHook is fastfront.NewServer.
	NewFastServerHook func(p *Proxy, idle time.Duration) *fasthttp.Server
	// FastListenerHook is fastfront.Listener.
	FastListenerHook func(ln net.Listener) net.Listener
	// HTTPHandlerHook is httpfront.Handler.
	HTTPHandlerHook func(p *Proxy) http.Handler
	// HeadCheckListenerHook is httpfront.HeadCheckListener.
	HeadCheckListenerHook func(ln net.Listener) net.Listener
	// NewFrontHook is front.New with c's fields.
	NewFrontHook func(p *Proxy, c FrontConfig) (Front, error)
	// FastAnswerHook and StdAnswerHook are the fronts' answer sinks.
	FastAnswerHook func(h *fasthttp.ResponseHeader) AnswerSink
	StdAnswerHook  func(w http.ResponseWriter) AnswerSink
	// Constants and errors of the front packages.
	MaxHeadBytes            int
	FastClientCheckInterval time.Duration
	ErrUnknownFront         error
	ErrLoopRemoved          error
)

// Front is front.Front, for the tests of this package.
type Front interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

// FrontConfig is front.Config, for the tests of this package.
type FrontConfig struct {
	Kind              string
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	MaxConns          int
	TLS               *tls.Config
	Logger            *slog.Logger
	HTTP2             string
}

// The kinds of front.
const (
	FrontFastHTTP = "fasthttp"
	FrontNetHTTP  = "net/http"
)

// NewFront is front.New.
func NewFront(p *Proxy, c FrontConfig) (Front, error) { return NewFrontHook(p, c) }

// NewServer is fastfront.NewServer.
func NewFastServer(p *Proxy, idle time.Duration) *fasthttp.Server { return NewFastServerHook(p, idle) }

// HeadCheckListener is httpfront.HeadCheckListener.
func HeadCheckListener(ln net.Listener) net.Listener { return HeadCheckListenerHook(ln) }

// httpHandler is the net/http front's handler of p.
func httpHandler(p *Proxy) http.Handler { return HTTPHandlerHook(p) }
