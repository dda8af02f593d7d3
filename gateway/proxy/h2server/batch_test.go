package h2server

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"

	"github.com/dwara/dwara/internal/testrun"
)

// countingConn is a connection that counts its writes.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestAnswersReadyTogetherShareAWrite: the answers of streams whose
// handlers become ready at the same moment (here all released by one
// channel close, as the answers of one poll of the endpoints are) leave
// in one or two writes to the connection, not one each: a writer that
// would flush lets the other runnable goroutines run first, and those
// that queue for the lock meanwhile leave the flush to the last of them.
// It is a heuristic of the scheduler's order, so the test counts the
// writes of ten such rounds of eight answers: at most 25 (the build
// before wrote 8 a round most of the time, 4.6 on average with four
// processors; this one 1.1-1.3).
func TestAnswersReadyTogetherShareAWrite(t *testing.T) {
	t.Parallel()
	const streams, rounds = 8, 10
	var arrived sync.WaitGroup
	var gate chan struct{}
	var gateMu sync.Mutex
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gateMu.Lock()
		g := gate
		gateMu.Unlock()
		arrived.Done()
		<-g
		_, _ = w.Write([]byte("answer of " + r.URL.Path))
	})}
	var writes atomic.Int64
	addr := serveOn(t, srv, func(nc net.Conn) net.Conn { return countingConn{Conn: nc, writes: &writes} })
	rc := (&testServer{addr: addr}).dialRaw(t)
	rc.handshake()
	var total int64
	id := uint32(1)
	for round := range rounds {
		gateMu.Lock()
		gate = make(chan struct{})
		gateMu.Unlock()
		arrived.Add(streams)
		for range streams {
			rc.request(id, http.MethodGet, "/s", true)
			id += 2
		}
		all := make(chan struct{})
		go func() { arrived.Wait(); close(all) }()
		testrun.Recv(t, all, "every handler waiting at the gate")
		before := writes.Load()
		gateMu.Lock()
		close(gate)
		gateMu.Unlock()
		ended := 0
		rc.until("the answers of the round", func(f http2.Frame) bool {
			if d, ok := f.(*http2.DataFrame); ok && d.StreamEnded() {
				ended++
			}
			return ended == streams
		})
		n := writes.Load() - before
		if n < 1 {
			t.Fatalf("round %d: the answers arrived with no write counted", round)
		}
		total += n
	}
	if total > 25 {
		t.Errorf("%d rounds of %d answers ready together left in %d writes; want at most 25", rounds, streams, total)
	}
}
