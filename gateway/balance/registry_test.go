package balance

import (
	"fmt"
	"sync"
	"testing"
)

func TestRegistryGet(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	a := r.Get("127.0.0.1:9001")
	if a == nil {
		t.Fatal("Get returned nil")
	}
	if !a.Up() {
		t.Error("new State is down")
	}
	if b := r.Get("127.0.0.1:9001"); b != a {
		t.Error("Get returned a different State for the same address")
	}
	// Addresses are keys as written.
	if c := r.Get("http://127.0.0.1:9001"); c == a {
		t.Error("Get returned the same State for a different address")
	}
	if got := r.Len(); got != 2 {
		t.Errorf("Len() = %d, want 2", got)
	}
}

func TestRegistryRetain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		keep map[string]struct{}
	}{
		{name: "keep some", keep: map[string]struct{}{"a:1": {}, "c:1": {}}},
		{name: "keep all", keep: map[string]struct{}{"a:1": {}, "b:1": {}, "c:1": {}}},
		{name: "keep an unknown address", keep: map[string]struct{}{"z:1": {}}},
		{name: "nil keeps nothing", keep: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewRegistry()
			before := map[string]*State{}
			for _, addr := range []string{"a:1", "b:1", "c:1"} {
				before[addr] = r.Get(addr)
				before[addr].Begin() // mark it, to tell it from a fresh one
			}
			r.Retain(tt.keep)
			wantLen := 0
			for addr := range before {
				if _, kept := tt.keep[addr]; kept {
					wantLen++
				}
			}
			if got := r.Len(); got != wantLen {
				t.Fatalf("Len() = %d after Retain, want %d", got, wantLen)
			}
			for addr, s := range before {
				_, kept := tt.keep[addr]
				got := r.Get(addr)
				if kept && got != s {
					t.Errorf("%s: kept address got a new State", addr)
				}
				if !kept && (got == s || got.Inflight() != 0) {
					t.Errorf("%s: dropped address kept its State", addr)
				}
			}
		})
	}
}

func TestRegistryConcurrentGet(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	const workers, addrs = 8, 50
	got := make([][]*State, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			got[w] = make([]*State, addrs)
			for i := range addrs {
				// Each worker walks the addresses from a different place.
				j := (i + w*7) % addrs
				got[w][j] = r.Get(fmt.Sprintf("10.0.0.%d:80", j))
			}
			if w == 0 {
				r.Retain(map[string]struct{}{})
			}
		})
	}
	wg.Wait()
	// A Retain raced with the Gets, so pointers may differ across workers,
	// but each must be a live State.
	for w := range workers {
		for i, s := range got[w] {
			if s == nil || !s.Up() {
				t.Fatalf("worker %d address %d: bad State %v", w, i, s)
			}
		}
	}
	// Without a concurrent Retain every worker sees the same pointer.
	r2 := NewRegistry()
	for w := range workers {
		wg.Go(func() {
			for i := range addrs {
				got[w][i] = r2.Get(fmt.Sprintf("10.0.0.%d:80", i))
			}
		})
	}
	wg.Wait()
	for w := 1; w < workers; w++ {
		for i := range addrs {
			if got[w][i] != got[0][i] {
				t.Fatalf("address %d: worker %d and worker 0 got different States", i, w)
			}
		}
	}
}
