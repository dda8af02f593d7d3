package main

import (
	"bytes"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// The host line of a run's header says what machine the ratios were
// measured on, down to what a system call costs there: the kernel's entry
// and exit, with whatever mitigations it runs, which a proxy pays on every
// read and write and which differs between virtual machines of one size.

// cpuModel returns the processor's name from /proc/cpuinfo's first
// "model name" line, "" when there is none.
func cpuModel(cpuinfo []byte) string {
	for line := range bytes.Lines(cpuinfo) {
		key, value, ok := bytes.Cut(line, []byte(":"))
		if ok && string(bytes.TrimSpace(key)) == "model name" {
			return strings.Join(strings.Fields(string(value)), " ")
		}
	}
	return ""
}

// syscallCost measures what the cheapest system call costs on this
// machine: getppid, which does nothing but enter and leave the kernel,
// made without telling Go's scheduler (syscall.Getppid is a raw call).
// It takes the fastest of a few batches, so that a batch the scheduler
// interrupted does not count.
func syscallCost() time.Duration {
	const batches, calls = 5, 20000
	best := time.Duration(1<<63 - 1)
	for range batches {
		start := time.Now()
		for range calls {
			syscall.Getppid()
		}
		best = min(best, time.Since(start))
	}
	return best / calls
}

// hostLine is the header's line about the machine: its processors, the
// kernel, the cost of a system call and the load average when the run
// ended (from /proc/loadavg).
func hostLine(ncpu int, model, osrelease string, call time.Duration, loadavg []byte) string {
	cpus := fmt.Sprintf("%d CPUs", ncpu)
	if model != "" {
		cpus += " (" + model + ")"
	}
	load := strings.Fields(string(loadavg))
	if len(load) > 3 {
		load = load[:3]
	}
	return fmt.Sprintf("# host: %s, Linux %s, a system call %d ns (getppid), load avg at the end %s",
		cpus, strings.TrimSpace(osrelease), call.Nanoseconds(), strings.Join(load, " "))
}
