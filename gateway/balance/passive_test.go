package balance

import (
	"sync"
	"testing"
	"time"
)

// fakeTimer stands in for time.AfterFunc: it records the ejection time and
// lets the test end the ejection when it decides the time has passed.
type fakeTimer struct {
	d   time.Duration
	end func()
}

func (f *fakeTimer) after(d time.Duration, end func()) { f.d, f.end = d, end }

// TestEjectionBackoff drives the passive state machine with a fake timer:
// each ejection that follows another without a success lasts twice as
// long, up to EjectionMax; the endpoint is up again when the time is up;
// a success brings the next ejection back to EjectionBase.
func TestEjectionBackoff(t *testing.T) {
	t.Parallel()
	var s State
	var timer fakeTimer
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		d, ok := s.eject(timer.after)
		if !ok || d != w || timer.d != w {
			t.Fatalf("ejection %d: %v %v (timer %v), want %v true", i+1, d, ok, timer.d, w)
		}
		if s.Up() || !s.Ejected() {
			t.Fatalf("ejection %d: up while ejected", i+1)
		}
		if _, again := s.eject(timer.after); again {
			t.Fatalf("ejection %d: ejected again while ejected", i+1)
		}
		timer.end()
		if !s.Up() || s.Ejected() {
			t.Fatalf("ejection %d: not up when its %v are up", i+1, d)
		}
	}
	s.PassiveOK()
	if d, ok := s.eject(timer.after); !ok || d != EjectionBase {
		t.Fatalf("after a success: ejection of %v %v, want %v", d, ok, EjectionBase)
	}
}

// TestPassiveStreaks: transport failures and 5xx answers count in
// separate streaks; an answer ends the transport streak, a success ends
// both, and a failure after an ejection's end extends the streak, so the
// threshold is still reached at once.
func TestPassiveStreaks(t *testing.T) {
	t.Parallel()
	var s State
	for i := 1; i <= 3; i++ {
		if n := s.PassiveFailure(); n != i {
			t.Fatalf("failure %d: streak %d", i, n)
		}
	}
	if n := s.Passive5xx(); n != 1 || s.fails.Load() != 0 {
		t.Fatalf("5xx after failures: 5xx streak %d, failure streak %d; want 1, 0", n, s.fails.Load())
	}
	if n := s.Passive5xx(); n != 2 {
		t.Fatalf("second 5xx: streak %d", n)
	}
	s.PassiveFailure()
	s.PassiveOK()
	if s.fails.Load() != 0 || s.fails5xx.Load() != 0 || s.ejections.Load() != 0 {
		t.Fatalf("after a success: streaks %d, %d, ejections %d; want 0s", s.fails.Load(), s.fails5xx.Load(), s.ejections.Load())
	}
	// Eject after 3, wait it out: the next failure makes the streak 4, and
	// the next ejection lasts twice as long.
	for range 3 {
		s.PassiveFailure()
	}
	var timer fakeTimer
	d, _ := s.eject(timer.after)
	timer.end()
	if n := s.PassiveFailure(); n != 4 {
		t.Fatalf("failure after the ejection: streak %d, want 4", n)
	}
	if d2, ok := s.eject(timer.after); !ok || d2 != 2*d {
		t.Fatalf("second ejection %v %v, want %v", d2, ok, 2*d)
	}
}

// TestEjectionComposesWithActiveChecks: the endpoint is up only while
// neither the active checks (SetUp) nor an ejection hold it out, and
// neither undoes the other.
func TestEjectionComposesWithActiveChecks(t *testing.T) {
	t.Parallel()
	var s State
	var timer fakeTimer
	if _, ok := s.eject(timer.after); !ok {
		t.Fatal("eject refused on a fresh state")
	}
	if s.Up() || !s.Ejected() {
		t.Fatal("ejected state is up")
	}
	s.SetUp(false)
	if changed := s.SetUp(true); !changed {
		t.Fatal("SetUp(true) after SetUp(false) reports no change")
	}
	if s.Up() {
		t.Fatal("the active checks' up undid the ejection")
	}
	timer.end()
	if !s.Up() {
		t.Fatal("not up after the ejection ended")
	}
	s.SetUp(false)
	if _, ok := s.eject(timer.after); !ok {
		t.Fatal("eject refused")
	}
	timer.end()
	if s.Up() {
		t.Fatal("the ejection's end undid the active checks' down")
	}
}

// TestEjectOnceConcurrently: of many concurrent Ejects, one ejects.
func TestEjectOnceConcurrently(t *testing.T) {
	t.Parallel()
	var s State
	var wg sync.WaitGroup
	var mu sync.Mutex
	ejected := 0
	for range 16 {
		wg.Go(func() {
			if _, ok := s.eject(func(time.Duration, func()) {}); ok {
				mu.Lock()
				ejected++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ejected != 1 || s.ejections.Load() != 1 {
		t.Fatalf("%d ejections (history %d), want 1", ejected, s.ejections.Load())
	}
}
