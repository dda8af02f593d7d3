package main

import (
	"testing"
	"time"
)

func TestCPUModel(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC  7B13 64-Core Processor\nflags\t: fpu\n\nprocessor\t: 1\nmodel name\t: other\n", "AMD EPYC 7B13 64-Core Processor"},
		{"processor\t: 0\nmodel\t\t: 1\n", ""},
		{"", ""},
	} {
		if got := cpuModel([]byte(c.in)); got != c.want {
			t.Errorf("cpuModel(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestHostLine(t *testing.T) {
	got := hostLine(2, "AMD EPYC", "6.18.44-fc-v1300\n", 412*time.Nanosecond, []byte("6.97 5.32 4.30 1/227 8641\n"))
	want := "# host: 2 CPUs (AMD EPYC), Linux 6.18.44-fc-v1300, a system call 412 ns (getppid), load avg at the end 6.97 5.32 4.30"
	if got != want {
		t.Errorf("hostLine = %q, want %q", got, want)
	}
	// No model and a short /proc/loadavg: the line is still whole.
	got = hostLine(4, "", "6.1.0", time.Microsecond, []byte("0.5"))
	want = "# host: 4 CPUs, Linux 6.1.0, a system call 1000 ns (getppid), load avg at the end 0.5"
	if got != want {
		t.Errorf("hostLine = %q, want %q", got, want)
	}
}

func TestSyscallCost(t *testing.T) {
	// A system call takes some time; how much is the machine's.
	if d := syscallCost(); d <= 0 {
		t.Errorf("syscallCost() = %v, want more than 0", d)
	}
}
