package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestStopEndsTheWholeGroup starts a shell that forks a second sleeper and
// checks that stop ends both, by process group.
func TestStopEndsTheWholeGroup(t *testing.T) {
	t.Parallel()
	ps := &procs{}
	defer ps.stopAll()
	p, err := ps.start("sleepers", nil, nil, "/bin/sh", "-c", "sleep 60 & sleep 60; wait")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := groupMembers(p.pgid())
		if err != nil {
			t.Fatal(err)
		}
		if len(m) >= 3 { // sh and two sleeps
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %d has %d members, want 3", p.pgid(), len(m))
		}
		time.Sleep(10 * time.Millisecond)
	}
	ps.stop(p)
	if !p.exited() {
		t.Error("leader still running after stop")
	}
	// Killed orphans may linger as zombies until PID 1 reaps them.
	if _, running, _ := groupCPU(p.pgid()); running != 0 {
		t.Errorf("group %d still has %d running members after stop", p.pgid(), running)
	}
	ps.stop(p) // idempotent
}

func TestRunIsBounded(t *testing.T) {
	t.Parallel()
	ps := &procs{}
	defer ps.stopAll()
	start := time.Now()
	_, err := ps.run(context.Background(), 200*time.Millisecond, "sleeper", nil, "sleep", "60")
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("run of sleep 60 with a 200 ms bound: %v", err)
	}
	// Bounded: it returned long before sleep's 60 s (with room for a
	// loaded machine).
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("run took %s", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ps.run(ctx, time.Minute, "sleeper", nil, "sleep", "60"); err == nil {
		t.Error("run under a cancelled context succeeded")
	}

	out, err := ps.run(context.Background(), 5*time.Second, "echo", []string{"X_BENCH=hello"}, "/bin/sh", "-c", `echo "$X_BENCH"; echo err >&2`)
	if err != nil || !strings.Contains(string(out), "hello") || !strings.Contains(string(out), "err") {
		t.Errorf("run echo = %q, %v", out, err)
	}
	if len(ps.live) != 0 {
		t.Errorf("%d processes left registered", len(ps.live))
	}
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	b := &tailBuffer{max: 8}
	b.Write([]byte("hello "))
	b.Write([]byte("world"))
	if got := string(b.Bytes()); got != "lo world" {
		t.Errorf("tail = %q, want %q", got, "lo world")
	}
	if got := lastLines([]byte("a\nb\nc\n"), 2); got != "\n    | b\n    | c" {
		t.Errorf("lastLines = %q", got)
	}
}
