package fastfront

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testrun"
)

// readEnds reads fc in the background and returns what the read ended
// with, once it ended, within the suite's deadline.
func readEnds(t *testing.T, fc *FirstHeadConn) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := fc.Read(b[:])
		done <- err
	}()
	return done
}

// endsAtDeadline fails the test unless done brings, within the suite's
// deadline, the error of a deadline that has passed, and no earlier than
// by (zero: any time). what names the read or write for the messages.
func endsAtDeadline(t *testing.T, done <-chan error, by time.Time, what string) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s ended with %v, want os.ErrDeadlineExceeded", what, err)
		}
		if now := time.Now(); now.Before(by) {
			t.Fatalf("%s: the deadline fired %v early", what, by.Sub(now))
		}
	case <-time.After(testrun.Timeout):
		t.Fatalf("%s did not fail at its deadline", what)
	}
}

// TestCoarseReadDeadline: a read deadline in the future is kept by the
// connection and enforced by the sweeper: a blocked read fails with the
// deadline's error, not before the deadline; a later deadline set before
// the first passes replaces it; a deadline already past fails the next
// read at once, and a new deadline in the future (or none) lifts it.
func TestCoarseReadDeadline(t *testing.T) {
	t.Parallel()
	fc, peer := firstHeadPair(t)
	fc.Release() // no first-head rule: the deadlines pass as given

	// Far off, then replaced by a near one: the near one fires.
	if err := fc.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	by := time.Now().Add(3 * sweepEvery)
	if err := fc.SetReadDeadline(by); err != nil {
		t.Fatal(err)
	}
	endsAtDeadline(t, readEnds(t, fc), by, "a read past its deadline")
	// The socket's past deadline stays in force until a new one is set.
	var b [1]byte
	if _, err := fc.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read after the deadline fired ended with %v, want os.ErrDeadlineExceeded", err)
	}
	// A deadline in the future lifts it: the read waits for the peer.
	if err := fc.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ended := readEnds(t, fc)
	write(t, peer, "x")
	if err := <-ended; err != nil {
		t.Fatalf("a read under a deadline an hour off: %v", err)
	}

	// A deadline in the past cuts the next read at once, without the
	// sweeper; clearing the deadline lifts it.
	if err := fc.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read after a past deadline ended with %v, want os.ErrDeadlineExceeded", err)
	}
	if err := fc.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	ended = readEnds(t, fc)
	write(t, peer, "y")
	if err := <-ended; err != nil {
		t.Fatalf("a read after the deadline was cleared: %v", err)
	}
}

// TestCoarseWriteDeadline: a write that the peer does not take fails at
// its write deadline (SetDeadline sets both).
func TestCoarseWriteDeadline(t *testing.T) {
	t.Parallel()
	fc, _ := firstHeadPair(t) // the peer reads nothing
	by := time.Now().Add(3 * sweepEvery)
	if err := fc.SetDeadline(by); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		for i := 0; i < 4096; i++ { // 256 MiB at most: far past any socket buffer
			if _, err := fc.Write(chunk); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	endsAtDeadline(t, done, by, "a write the peer does not take")
}

// TestSweeperLetsGo: the sweeper holds a connection from its first
// deadline in the future until it is closed, and a closed connection is
// never held again.
func TestSweeperLetsGo(t *testing.T) {
	t.Parallel()
	fc, _ := firstHeadPair(t)
	if fc.swept.Load() {
		t.Fatal("a connection without a deadline is held by the sweeper")
	}
	if err := fc.SetWriteDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !fc.swept.Load() || sweep.held.Load() < 1 {
		t.Fatalf("after a deadline in the future: held %v, sweeper holds %d", fc.swept.Load(), sweep.held.Load())
	}
	if err := fc.Close(); err != nil {
		t.Fatal(err)
	}
	if fc.swept.Load() {
		t.Fatal("a closed connection is still held by the sweeper")
	}
	_ = fc.SetReadDeadline(time.Now().Add(time.Hour))
	if fc.swept.Load() {
		t.Fatal("a deadline set after Close made the sweeper hold the connection again")
	}
}

// TestCoarseDeadlineRaces sets deadlines on a connection from several
// goroutines (future ones, past ones, none) while the sweeper expires
// them, for the race detector; at the end a deadline in the future lets
// a read through, whatever came before.
func TestCoarseDeadlineRaces(t *testing.T) {
	t.Parallel()
	fc, peer := firstHeadPair(t)
	fc.Release()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; i < 2000; i++ {
				switch (g + i) % 4 {
				case 0:
					_ = fc.SetReadDeadline(time.Now().Add(time.Microsecond))
				case 1:
					_ = fc.SetReadDeadline(time.Unix(1, 0))
				case 2:
					_ = fc.SetReadDeadline(time.Time{})
				default:
					_ = fc.SetReadDeadline(time.Now().Add(time.Hour))
				}
				if i%500 == 0 {
					time.Sleep(sweepEvery / 10) // let the sweeper in
				}
			}
		})
	}
	wg.Wait()
	if err := fc.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ended := readEnds(t, fc)
	write(t, peer, "z")
	if err := <-ended; err != nil {
		t.Fatalf("a read under a deadline an hour off, after the races: %v", err)
	}
}

// write writes s to c.
func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// BenchmarkSweep10k is one sweep over 10,000 connections whose deadlines
// are all in the future (idle keep-alive connections): what the sweeper
// costs every sweepEvery at the connection cap's default.
func BenchmarkSweep10k(b *testing.B) {
	s := &sweeper{every: sweepEvery, running: true} // no goroutine: the benchmark sweeps
	far := time.Now().Add(time.Hour)
	conns := make([]*FirstHeadConn, 10000)
	for i := range conns {
		c := &FirstHeadConn{shard: uint8(i % sweepShards)}
		c.rd.want.Store(far.UnixNano())
		c.wd.want.Store(far.UnixNano())
		s.add(c)
		conns[i] = c
	}
	now := time.Now().UnixNano()
	b.ResetTimer()
	for b.Loop() {
		s.sweepOnce(now)
	}
}

// TestSweeperStopsAndStartsAgain: a sweeper of its own stops once it
// holds no connection, and the next connection it is given starts it
// again: that connection's passed deadline fails its read.
func TestSweeperStopsAndStartsAgain(t *testing.T) {
	t.Parallel()
	s := newSweeper()
	s.every = time.Millisecond
	running := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.running
	}
	first, _ := firstHeadPair(t)
	first.rd.want.Store(time.Now().Add(time.Hour).UnixNano())
	s.add(first)
	if !running() {
		t.Fatal("the sweeper did not start with its first connection")
	}
	s.remove(first)
	testrun.Eventually(t, "the sweeper to stop with no connection", func() bool { return !running() })

	second, _ := firstHeadPair(t)
	second.rd.want.Store(1) // long passed
	s.add(second)
	endsAtDeadline(t, readEnds(t, second), time.Time{}, "a read past its deadline, after the sweeper started again")
	s.remove(second)
}
