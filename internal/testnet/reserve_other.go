//go:build !linux

package testnet

// reserve reports true: without Linux's abstract Unix sockets, ports are
// kept apart within the test process only.
func reserve(int) bool { return true }
