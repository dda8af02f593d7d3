package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which Linux fixes at 100 per second for what it shows user space.
const clockTick = 10 * time.Millisecond

// procStat is what the benchmark reads from one /proc/<pid>/stat.
type procStat struct {
	pid   int
	pgrp  int
	state byte // 'R', 'S', 'Z' (zombie: ended, not yet reaped), ...
	// cpu is utime+stime of the process (all its threads) plus
	// cutime+cstime, the times of children it has waited for: a worker
	// that exits and is reaped by its master stays counted.
	cpu time.Duration
}

// parseStat parses the contents of /proc/<pid>/stat. The command name, in
// parentheses, may itself contain spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return procStat{}, fmt.Errorf("parse stat %.40q: no (comm)", b)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat %.40q: pid: %w", b, err)
	}
	// Fields after the comm, numbered as in proc(5): [0] is field 3 (state).
	f := bytes.Fields(b[closing+1:])
	const pgrp, utime, cstime = 5 - 3, 14 - 3, 17 - 3
	if len(f) <= cstime {
		return procStat{}, fmt.Errorf("parse stat of %d: %d fields after comm, want more than %d", pid, len(f), cstime)
	}
	st := procStat{pid: pid, state: f[0][0]}
	if st.pgrp, err = strconv.Atoi(string(f[pgrp])); err != nil {
		return procStat{}, fmt.Errorf("parse stat of %d: pgrp: %w", pid, err)
	}
	var ticks int64
	for _, field := range f[utime : cstime+1] {
		n, err := strconv.ParseInt(string(field), 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("parse stat of %d: cpu time: %w", pid, err)
		}
		ticks += n
	}
	st.cpu = time.Duration(ticks) * clockTick
	return st, nil
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, fmt.Errorf("read stat: %w", err)
	}
	return parseStat(b)
}

// groupMembers returns the stats of every process in process group pgid,
// zombies included (their times are final but still shown). A process that
// ends while /proc is walked is skipped.
func groupMembers(pgid int) ([]procStat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("group %d: %w", pgid, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("group %d: %w", pgid, err)
	}
	var out []procStat
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue // not a process directory
		}
		st, err := readStat(pid)
		if err != nil || st.pgrp != pgid {
			continue
		}
		out = append(out, st)
	}
	return out, nil
}

// groupCPU returns the CPU time used so far by the processes of group pgid
// (see procStat.cpu) and how many of them are running (not zombies). The difference of two
// readings is the group's CPU time in between, to a tick (10 ms) per process.
func groupCPU(pgid int) (time.Duration, int, error) {
	members, err := groupMembers(pgid)
	if err != nil {
		return 0, 0, err
	}
	var sum time.Duration
	running := 0
	for _, m := range members {
		sum += m.cpu
		if m.state != 'Z' {
			running++
		}
	}
	return sum, running, nil
}
