package h2server

import (
	"context"
	"sync"
	"time"
)

// streamContext is a stream's request context: cancelled when the stream
// ends (run, cut), its values those of the connection's context. It lives
// inside the stream, so a stream's context costs no allocation of its own
// (context.WithCancel made three, and each context.AfterFunc on it four
// more); its Done channel is made only when someone asks for it.
//
// AfterFunc is the method context.AfterFunc looks for; a caller that
// finds it can call it directly and skip context.AfterFunc's wrapping.
type streamContext struct {
	parent context.Context

	mu     sync.Mutex
	err    error
	done   chan struct{} // made by the first Done, closed by cancel
	afters []afterFunc   // functions to start at cancel, in slots at first
	slots  [2]afterFunc
	nextID uint64
}

type afterFunc struct {
	id uint64
	f  func()
}

// closedDone is the Done channel of a context already cancelled when
// first asked.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (x *streamContext) Deadline() (time.Time, bool) { return x.parent.Deadline() }
func (x *streamContext) Value(key any) any           { return x.parent.Value(key) }

func (x *streamContext) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

func (x *streamContext) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done == nil {
		if x.err != nil {
			return closedDone
		}
		x.done = make(chan struct{})
	}
	return x.done
}

// cancel ends the context (context.Canceled); later calls do nothing.
// The functions of AfterFunc start each in its own goroutine, as
// context.AfterFunc's do.
func (x *streamContext) cancel() {
	x.mu.Lock()
	if x.err != nil {
		x.mu.Unlock()
		return
	}
	x.err = context.Canceled
	if x.done != nil {
		close(x.done)
	}
	afters := x.afters
	x.afters = nil
	x.mu.Unlock()
	for _, a := range afters {
		go a.f()
	}
}

// AfterFunc arranges f to run in its own goroutine once x is cancelled
// (at once when it is), with context.AfterFunc's contract: stop reports
// whether it kept f from running.
func (x *streamContext) AfterFunc(f func()) (stop func() bool) {
	x.mu.Lock()
	if x.err != nil {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	x.nextID++
	id := x.nextID
	if x.afters == nil {
		x.afters = x.slots[:0]
	}
	x.afters = append(x.afters, afterFunc{id, f})
	x.mu.Unlock()
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		for i, a := range x.afters {
			if a.id == id {
				x.afters = append(x.afters[:i], x.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}
