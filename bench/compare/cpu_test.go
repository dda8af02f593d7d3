package main

import (
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	// comm with spaces and parentheses; utime 150, stime 50, cutime 7, cstime 3.
	line := "4242 (nginx: (worker) x) S 1 4240 4240 0 -1 4194624 100 0 0 0 150 50 7 3 20 0 1 0 123 456 789\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.pid != 4242 || st.pgrp != 4240 || st.state != 'S' || st.cpu != 210*clockTick {
		t.Errorf("parseStat = %+v, want pid 4242, pgrp 4240, cpu %s", st, 210*clockTick)
	}
	for _, bad := range []string{"", "12 no-parens S 1", "12 (x) S 1 2", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
}

// burn spins until the process has used at least d more CPU time, per
// getrusage, and returns how much it used.
func burn(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	x := 1
	for cpu()-start < d {
		for i := range 100000 {
			x = x*31 + i
		}
	}
	if x == 42 {
		t.Log(x) // keeps the loop
	}
	return cpu() - start
}

// TestCPUOfThisProcess reads the test process's own times from /proc
// around a CPU burn and compares with getrusage. Not parallel: other
// tests would add CPU time.
func TestCPUOfThisProcess(t *testing.T) {
	self, err := readStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.pid != os.Getpid() || self.pgrp != syscall.Getpgrp() {
		t.Errorf("readStat(self) = %+v, want pid %d, pgrp %d", self, os.Getpid(), syscall.Getpgrp())
	}
	members, err := groupMembers(syscall.Getpgrp())
	if err != nil || !slices.ContainsFunc(members, func(m procStat) bool { return m.pid == os.Getpid() }) {
		t.Fatalf("groupMembers(own group) = %v, %v; want this process among them", members, err)
	}

	used := burn(t, 300*time.Millisecond)
	after, err := readStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	got := after.cpu - self.cpu
	// Both count in ticks (10 ms) but sample at different moments.
	if diff := got - used; diff < -50*time.Millisecond || diff > 50*time.Millisecond {
		t.Errorf("/proc says %s of CPU, getrusage %s", got, used)
	}
	// The group holds this process (and, under go test, the go command):
	// its total is at least this process's own.
	group, _, err := groupCPU(syscall.Getpgrp())
	if err != nil {
		t.Fatal(err)
	}
	if group < after.cpu {
		t.Errorf("group CPU %s is less than this process's %s", group, after.cpu)
	}
}
