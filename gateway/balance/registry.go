package balance

import "sync"

// Registry hands out one *State per endpoint address, so that every
// generation naming an endpoint shares its in-flight count, latency estimate
// and health. Addresses are keys as written in the spec ("host:port" and
// "http://host:port" are different endpoints).
//
// Get is meant for compiling a generation, not for the request path. A
// Registry is safe for concurrent use; create one with NewRegistry (the zero
// value is not usable) and do not copy it.
type Registry struct {
	mu     sync.Mutex
	states map[string]*State
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{states: make(map[string]*State)}
}

// Get returns the State of addr, creating it (up, idle) on first use. It
// returns the same pointer for the same address until Retain drops it.
func (r *Registry) Get(addr string) *State {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.states[addr]
	if !ok {
		s = new(State)
		r.states[addr] = s
	}
	return s
}

// Retain drops the States of every address not in keep; those in keep stay
// the same pointers. Call it after a generation is applied, with the
// addresses of every generation still serving requests. A dropped State keeps
// working for balancers that still hold it; a later Get of its address
// starts afresh. A nil keep drops everything.
func (r *Registry) Retain(keep map[string]struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr := range r.states {
		if _, ok := keep[addr]; !ok {
			delete(r.states, addr)
		}
	}
}

// Forget drops the States of addrs, as Retain drops those it does not
// keep.
func (r *Registry) Forget(addrs ...string) {
	if len(addrs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, addr := range addrs {
		delete(r.states, addr)
	}
}

// Len returns the number of addresses the Registry holds.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.states)
}
