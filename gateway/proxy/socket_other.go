//go:build !linux

package proxy

import "net"

// Socket reads and writes through its connection where a socket cannot be
// read with raw system calls (see socket_linux.go).
type Socket struct{}

// Init does nothing here.
func (s *Socket) Init(net.Conn) {}

// Read reads from nc into p.
func (s *Socket) Read(nc net.Conn, p []byte) (int, error) { return nc.Read(p) }

// Write writes p to nc.
func (s *Socket) Write(nc net.Conn, p []byte) (int, error) { return nc.Write(p) }

// WriteAwait writes p to nc (see socket_linux.go).
func (s *Socket) WriteAwait(nc net.Conn, p []byte) (int, error) { return nc.Write(p) }

// HoldIn does nothing here.
func (s *Socket) HoldIn([]byte) {}

// Hold keeps nothing here: the caller writes p.
func (s *Socket) Hold([]byte) bool { return false }

// HeldLen is 0 here: nothing is held.
func (s *Socket) HeldLen() int { return 0 }

// Flush has nothing to write here.
func (s *Socket) Flush(net.Conn) error { return nil }

// SpliceFrom moves nothing here: the caller copies (ErrNoSplice).
func (s *Socket) SpliceFrom(net.Conn, *Socket, net.Conn, int64, func()) (int64, bool, error) {
	return 0, false, ErrNoSplice
}

// SpliceSome moves nothing here: the caller copies (ErrNoSplice).
func (s *Socket) SpliceSome(net.Conn, *Socket, net.Conn, int64) (int64, bool, error) {
	return 0, false, ErrNoSplice
}
