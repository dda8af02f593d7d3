package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a process group gets between SIGTERM and SIGKILL.
const stopGrace = 5 * time.Second

// procs starts every process of a run in a process group of its own and
// remembers it until it is stopped, so that stopAll (deferred by run) can
// stop whatever is still running by process-group id: on success, on error
// and after SIGINT/SIGTERM. Nothing is ever signalled by name. The zero value
// is ready to use; a procs is safe for concurrent use and must not be copied.
type procs struct {
	mu   sync.Mutex
	live []*proc
}

// proc is one started process, the leader of its own process group (its
// PID is the group id).
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once Wait has returned
	err  error         // Wait's result, set before done is closed
	out  *tailBuffer   // last bytes of stdout+stderr when not sent elsewhere
}

// pgid returns the process-group id, which equals the PID.
func (p *proc) pgid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the last n lines p wrote, when they were kept.
func (p *proc) tail(n int) string {
	if p.out == nil {
		return ""
	}
	return lastLines(p.out.Bytes(), n)
}

// start runs argv in a new process group with env added to the environment.
// stdout and stderr go to out when it is not nil, else to a small tail
// buffer kept for error messages.
func (ps *procs) start(name string, out io.Writer, env []string, argv ...string) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	if out == nil {
		p.out = &tailBuffer{max: 4096}
		out = p.out
	}
	cmd.Stdout, cmd.Stderr = out, out
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	ps.live = append(ps.live, p)
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// run starts argv like start and waits for it to end, for at most timeout
// and no longer than ctx lives; then it stops the process group. It returns
// what the process wrote to stdout and stderr (combined, the last 64 KiB).
func (ps *procs) run(ctx context.Context, timeout time.Duration, name string, env []string, argv ...string) ([]byte, error) {
	out := &tailBuffer{max: 64 << 10}
	p, err := ps.start(name, out, env, argv...)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		ps.stop(p)
		if p.err != nil {
			return out.Bytes(), fmt.Errorf("%s: %w", name, p.err)
		}
		return out.Bytes(), nil
	case <-timer.C:
		ps.stop(p)
		return out.Bytes(), fmt.Errorf("%s: timed out after %s", name, timeout)
	case <-ctx.Done():
		ps.stop(p)
		return out.Bytes(), fmt.Errorf("%s: %w", name, context.Cause(ctx))
	}
}

// stop ends p's process group: SIGTERM to the group, up to stopGrace for
// the leader to exit, then SIGKILL to whatever is left of the group (a
// worker the leader left behind, or a leader that ignored SIGTERM). The
// group is signalled only while /proc shows running members of it, so a
// group id that has gone is never signalled. stop is idempotent.
func (ps *procs) stop(p *proc) {
	ps.mu.Lock()
	i := slices.Index(ps.live, p)
	if i >= 0 {
		ps.live = slices.Delete(ps.live, i, i+1)
	}
	ps.mu.Unlock()
	if i < 0 {
		return
	}
	pgid := p.pgid()
	if !p.exited() {
		signalGroup(pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
		}
	}
	signalGroup(pgid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
	}
}

// stopAll stops every process still running, newest first.
func (ps *procs) stopAll() {
	for {
		ps.mu.Lock()
		n := len(ps.live)
		var p *proc
		if n > 0 {
			p = ps.live[n-1]
		}
		ps.mu.Unlock()
		if p == nil {
			return
		}
		ps.stop(p)
	}
}

// signalGroup sends sig to process group pgid if it still has members.
func signalGroup(pgid int, sig syscall.Signal) {
	if pgid <= 1 {
		return
	}
	if _, running, err := groupCPU(pgid); err == nil && running == 0 {
		return
	}
	err := syscall.Kill(-pgid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintf(os.Stderr, "compare: kill -%d -- -%d: %v\n", sig, pgid, err)
	}
}

// tailBuffer is an io.Writer that keeps the last max bytes written to it.
// It is safe for concurrent use (exec copies stdout and stderr from two
// goroutines) and must not be copied.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// Write keeps the tail of what it is given; it never fails.
func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = slices.Delete(t.buf, 0, over)
	}
	return len(b), nil
}

// Bytes returns a copy of what the buffer holds.
func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf)
}

// lastLines returns at most n trailing lines of b, indented for a log.
func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var s bytes.Buffer
	for _, l := range lines {
		if len(l) > 0 {
			s.WriteString("\n    | ")
			s.Write(l)
		}
	}
	return s.String()
}
