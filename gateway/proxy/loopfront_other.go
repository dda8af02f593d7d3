//go:build !linux

package proxy

import (
	"context"
	"errors"
	"net"

	"github.com/valyala/fasthttp"
)

// LoopSupported reports whether the loop front runs on this system.
const LoopSupported = false

// LoopServer is the loop front, which needs Linux (epoll); elsewhere
// Serve fails.
type LoopServer struct{ fast *fasthttp.Server }

// NewLoopServer returns a loop front that cannot serve on this system.
func NewLoopServer(p *Proxy, fast *fasthttp.Server, maxConns int) *LoopServer {
	return &LoopServer{fast: fast}
}

// Serve fails: the loop front needs Linux.
func (s *LoopServer) Serve(net.Listener) error {
	return errors.New("the loop front needs Linux (epoll); use --front fasthttp")
}

// Shutdown shuts the fasthttp server down.
func (s *LoopServer) Shutdown(ctx context.Context) error { return s.fast.ShutdownWithContext(ctx) }

// Conns is 0.
func (s *LoopServer) Conns() int64 { return 0 }
