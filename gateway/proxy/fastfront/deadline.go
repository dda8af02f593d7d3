package fastfront

import (
	"sync"
	"sync/atomic"
	"time"
)

// Coarse deadlines: fasthttp sets three deadlines on a client connection
// for each request (the keep-alive wait, the request head, the answer's
// write), each far off and each moved a little by the next request. A
// deadline set on a Go connection is a clock read and a runtime timer
// moved in its heap, three times a request (docs/performance.md has what
// that cost and what this won back).
// A FirstHeadConn keeps the deadline it is given as a number instead, and
// one sweeper for the process looks at every connection's numbers each
// sweepEvery: a connection whose deadline has passed gets a deadline in
// the past on its socket then, which fails its pending and later reads
// (or writes) as the deadline would have, until a new deadline is set.
// A deadline so fires up to sweepEvery late, never early. A deadline that
// is already past when it is set (one that is to cut a read or write at
// once) goes to the socket at once, as does clearing one the socket has.
// "Already past" is judged by the sweeper's clock, the time of its last
// sweep (reading the clock costs 60 ns on the development machine, and a
// request sets three deadlines): a deadline between that and now is the
// next sweep's, within the sweepEvery promised.

// sweepEvery is how often the sweeper looks at the connections'
// deadlines: how late a deadline may fire.
const sweepEvery = 50 * time.Millisecond

// onSocket is a coarseDeadline's want while the deadline set on the
// socket is the one in force: a past one, set by the sweeper or by a
// caller.
const onSocket = -1

// coarseDeadline is one direction's deadline of a FirstHeadConn.
type coarseDeadline struct {
	// want is the deadline in Unix nanoseconds; 0: none; onSocket: the
	// socket's deadline is in force.
	want atomic.Int64
}

// deadlineDir is the socket setter of one direction.
type deadlineDir func(*FirstHeadConn, time.Time) error

func setSocketRead(c *FirstHeadConn, t time.Time) error  { return c.Conn.SetReadDeadline(t) }
func setSocketWrite(c *FirstHeadConn, t time.Time) error { return c.Conn.SetWriteDeadline(t) }

// set sets the deadline t of c's direction d (socket sets it on the
// socket). A deadline in the future is only kept (the sweeper enforces
// it); a past one goes to the socket.
func (d *coarseDeadline) set(c *FirstHeadConn, t time.Time, socket deadlineDir) error {
	var n int64 // none
	if !t.IsZero() {
		if n = t.UnixNano(); n <= sweep.now.Load() {
			c.dmu.Lock()
			d.want.Store(onSocket)
			err := socket(c, t)
			c.dmu.Unlock()
			return err
		}
		if !c.swept.Load() {
			sweep.add(c)
		}
	}
	if d.want.Swap(n) == onSocket {
		return c.clearSocket(d, socket)
	}
	return nil
}

// clearSocket clears the socket's deadline of direction d, which was in
// force until the caller replaced d's want, unless a past deadline was
// set meanwhile (the last set wins).
func (c *FirstHeadConn) clearSocket(d *coarseDeadline, socket deadlineDir) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if d.want.Load() == onSocket {
		return nil
	}
	return socket(c, time.Time{})
}

// expire puts a past deadline on the socket for d when d's want has
// passed by now (Unix nanoseconds); the sweeper calls it.
func (c *FirstHeadConn) expire(d *coarseDeadline, now int64, socket deadlineDir) {
	w := d.want.Load()
	if w <= 0 || w > now {
		return
	}
	c.dmu.Lock()
	if d.want.CompareAndSwap(w, onSocket) {
		_ = socket(c, time.Unix(1, 0))
	}
	c.dmu.Unlock()
}

// sweeper holds the connections with coarse deadlines, in intrusive lists
// of sweepShards shards (so that a sweep holds each lock for a sixteenth of
// the list, and a connection that gets its first deadline meanwhile waits
// at most that long), and enforces them, on a goroutine that runs while
// any is held. One sweep of 10,000 connections takes about 120 µs on the
// development machine (BenchmarkSweep10k): a quarter of a per cent of a
// core at the default connection cap.
type sweeper struct {
	shards [sweepShards]sweepShard
	held   atomic.Int64 // connections in the shards
	// mu guards running: set while the goroutine runs.
	mu      sync.Mutex
	running bool
	every   time.Duration // sweepEvery but in tests
	// now is the time of the last sweep (or of the start), in Unix
	// nanoseconds: a deadline before it is past.
	now atomic.Int64
}

// sweepShards is how many lists the sweeper holds connections in.
const sweepShards = 16

// sweepShard is one list of the sweeper's, under its own lock.
type sweepShard struct {
	mu   sync.Mutex
	head *FirstHeadConn
}

// shardSeq deals new connections out to the shards in turn.
var shardSeq atomic.Uint32

var sweep = newSweeper()

func newSweeper() *sweeper {
	s := &sweeper{every: sweepEvery}
	s.now.Store(time.Now().UnixNano())
	return s
}

// add holds c, once, until remove, and starts the sweeper when it is not
// running.
func (s *sweeper) add(c *FirstHeadConn) {
	sh := &s.shards[c.shard]
	sh.mu.Lock()
	if c.swept.Load() || c.closed {
		sh.mu.Unlock()
		return
	}
	c.swept.Store(true)
	c.next = sh.head
	if sh.head != nil {
		sh.head.prev = c
	}
	sh.head = c
	s.held.Add(1)
	sh.mu.Unlock()
	s.mu.Lock()
	if !s.running {
		s.running = true
		go s.run()
	}
	s.mu.Unlock()
}

// remove lets go of c for good (c is closed).
func (s *sweeper) remove(c *FirstHeadConn) {
	sh := &s.shards[c.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c.closed = true
	if !c.swept.Load() {
		return
	}
	c.swept.Store(false)
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		sh.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
	s.held.Add(-1)
}

// run sweeps every s.every until no connection is held.
func (s *sweeper) run() {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for range t.C {
		if !s.sweepOnce(time.Now().UnixNano()) {
			return
		}
	}
}

// sweepOnce expires the deadlines that have passed by now (Unix
// nanoseconds); false: no connection is held, and the sweeper stopped (a
// connection added meanwhile finds it stopped and starts it again).
func (s *sweeper) sweepOnce(now int64) bool {
	s.now.Store(now)
	if s.held.Load() == 0 {
		s.mu.Lock()
		stop := s.held.Load() == 0
		if stop {
			s.running = false
		}
		s.mu.Unlock()
		if stop {
			return false
		}
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for c := sh.head; c != nil; c = c.next {
			c.expire(&c.rd, now, setSocketRead)
			c.expire(&c.wd, now, setSocketWrite)
		}
		sh.mu.Unlock()
	}
	return true
}
