package h2server

import (
	"sync"
	"time"
)

// workers are the goroutines that run the handlers, kept between streams:
// a handler's goroutine grows its stack to what the proxy's exchange
// needs, and a new goroutine for every stream would grow it again (the
// copies were 6% of the server's CPU under load). An idle worker waits
// for its next stream; those idle for a whole sweep (workerIdle) end.
type workers struct {
	mu      sync.Mutex
	idle    []*worker // the most recently idle last: taken first
	sweep   *time.Timer
	stopped bool // no worker waits any more (stop)
}

type worker struct {
	next chan *stream
	used bool // ran a stream since the last sweep
}

// workerIdle is how long an idle worker is kept, about.
const workerIdle = 10 * time.Second

// maxIdleWorkers bounds the workers kept idle.
const maxIdleWorkers = 4096

// run runs st's handler on an idle worker, or on a new one.
func (ws *workers) run(st *stream) {
	ws.mu.Lock()
	if n := len(ws.idle); n > 0 {
		w := ws.idle[n-1]
		ws.idle[n-1] = nil
		ws.idle = ws.idle[:n-1]
		ws.mu.Unlock()
		w.next <- st
		return
	}
	ws.mu.Unlock()
	w := &worker{next: make(chan *stream, 1)}
	go ws.work(w, st)
}

// work runs st, then the streams handed to w, until a sweep ends it.
func (ws *workers) work(w *worker, st *stream) {
	for st != nil {
		st.c.run(st)
		if !ws.park(w) {
			return
		}
		st = <-w.next
	}
}

// park makes w idle; false when enough are idle already.
func (ws *workers) park(w *worker) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.stopped || len(ws.idle) >= maxIdleWorkers {
		return false
	}
	w.used = true
	ws.idle = append(ws.idle, w)
	if ws.sweep == nil {
		ws.sweep = time.AfterFunc(workerIdle, ws.sweepIdle)
	}
	return true
}

// sweepIdle ends the idle workers that ran nothing since the last sweep,
// and sweeps again while any is idle.
func (ws *workers) sweepIdle() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	kept := ws.idle[:0]
	for _, w := range ws.idle {
		if w.used {
			w.used = false
			kept = append(kept, w)
		} else {
			w.next <- nil // buffered: never blocks
		}
	}
	clear(ws.idle[len(kept):])
	ws.idle = kept
	if len(ws.idle) > 0 {
		ws.sweep.Reset(workerIdle)
	} else {
		ws.sweep = nil
	}
}

// stop ends the idle workers, and makes each busy one end with its
// stream: the server is closed.
func (ws *workers) stop() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.stopped = true
	for _, w := range ws.idle {
		w.next <- nil
	}
	clear(ws.idle)
	ws.idle = nil
	if ws.sweep != nil {
		ws.sweep.Stop()
		ws.sweep = nil
	}
}
