package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// The flags of every splice call: move the pages rather than copy them
// where the kernel can, and never block (the sockets are non-blocking
// already; this makes the pipe so too).
const spliceFlags = 0x1 | 0x2 // SPLICE_F_MOVE | SPLICE_F_NONBLOCK

// fSetPipeSize is fcntl's F_SETPIPE_SZ, which the syscall package does
// not name.
const fSetPipeSize = 1031

// splicePipe is a pipe the bytes of a splice cross, with the count of
// bytes in it, and the fill or drain under way: fillIO and drainIO, as
// method values made once with the pipe, so that a splice allocates
// nothing.
type splicePipe struct {
	r, w int
	n    int

	fill, drain func(uintptr) bool
	limit       int           // the most a fill takes
	got         int           // what the fill's last call took
	moved       int64         // what the drain wrote
	errno       syscall.Errno // the call's failure
}

// pipes keeps up to maxIdlePipes empty pipes for the next splice; a
// pipe given back with bytes in it (its splice failed halfway) is
// closed instead. live counts the pipes open, kept or in use: at most
// maxPipes, so that answers relayed at once cannot take more than
// 2 x maxPipes file descriptors from the connections (a quarter of the
// process's at most); past it an answer is copied.
var pipes struct {
	sync.Mutex
	free []*splicePipe
	live int
}

const maxIdlePipes = 64

// maxPipes is pipeLimit of the process's file descriptor limit, as Go
// raised it at start.
var maxPipes = func() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return pipeLimit(0)
	}
	return pipeLimit(lim.Cur)
}()

// pipeLimit is the most pipes open at once for a process that may open
// nofile descriptors: an eighth of them (two descriptors a pipe, so a
// quarter of the descriptors at most), and no more than 1,024. Where it
// is 0 every answer is copied.
func pipeLimit(nofile uint64) int {
	return int(min(nofile/8, 1024))
}

// errNoPipe is getPipe's answer when maxPipes are open.
var errNoPipe = errors.New("splice: all pipes in use")

// getPipe returns an empty pipe, a kept one when there is one.
func getPipe() (*splicePipe, error) {
	pipes.Lock()
	if n := len(pipes.free); n > 0 {
		p := pipes.free[n-1]
		pipes.free[n-1] = nil
		pipes.free = pipes.free[:n-1]
		pipes.Unlock()
		return p, nil
	}
	if pipes.live >= maxPipes {
		pipes.Unlock()
		return nil, errNoPipe
	}
	pipes.live++
	pipes.Unlock()
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		pipes.Lock()
		pipes.live--
		pipes.Unlock()
		return nil, os.NewSyscallError("pipe2", err)
	}
	// A larger pipe takes a larger batch; where the system refuses (its
	// fs.pipe-max-size, or the user's pipe pages), the default (64 KiB)
	// serves in more batches.
	_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, uintptr(fds[1]), fSetPipeSize, spliceBatch)
	p := &splicePipe{r: fds[0], w: fds[1]}
	p.fill, p.drain = p.fillIO, p.drainIO
	return p, nil
}

// putPipe keeps p for the next splice, or closes it when it holds bytes
// or enough pipes are kept.
func putPipe(p *splicePipe) {
	pipes.Lock()
	if p.n == 0 && len(pipes.free) < maxIdlePipes {
		pipes.free = append(pipes.free, p)
		pipes.Unlock()
		return
	}
	pipes.live--
	pipes.Unlock()
	_ = syscall.Close(p.r)
	_ = syscall.Close(p.w)
}

// SpliceFrom moves n bytes from src's socket (srcConn's) to s's (dst's)
// through a pipe, by splice(2): each batch fills the pipe from src,
// waiting for src to have bytes as a read does (under srcConn's read
// deadline), then drains it into dst, waiting for room as a write does
// (under dst's write deadline), having run before, when it is not nil
// (to move that deadline). Bytes held on s (Hold) go first. The reads are
// serialized with src's other reads, the writes with s's other writes,
// each only while it runs.
//
// It returns the bytes that reached dst, and reports whether an error is
// src's side: its read failed, or it ended before n bytes
// (io.ErrUnexpectedEOF); an error of dst's side is its write's.
// ErrNoSplice, with nothing moved, when either socket is not a plain TCP
// one or no pipe can be had.
func (s *Socket) SpliceFrom(dst net.Conn, src *Socket, srcConn net.Conn, n int64, before func()) (moved int64, srcSide bool, err error) {
	return s.spliceFrom(dst, src, srcConn, n, before, true)
}

// SpliceSome is SpliceFrom of one batch: it moves what src has, up to n,
// once it has some, as a read returns what has come.
func (s *Socket) SpliceSome(dst net.Conn, src *Socket, srcConn net.Conn, n int64) (moved int64, srcSide bool, err error) {
	return s.spliceFrom(dst, src, srcConn, n, nil, false)
}

func (s *Socket) spliceFrom(dst net.Conn, src *Socket, srcConn net.Conn, n int64, before func(), whole bool) (moved int64, srcSide bool, err error) {
	if s.rc == nil || src.rc == nil {
		return 0, false, ErrNoSplice
	}
	p, err := getPipe()
	if err != nil {
		return 0, false, ErrNoSplice
	}
	defer putPipe(p)
	for moved < n {
		if err := src.fillPipe(srcConn, p, min(n-moved, spliceBatch)); err != nil {
			return moved, true, err
		}
		if before != nil {
			before()
		}
		m, err := s.drainPipe(dst, p)
		moved += m
		if err != nil {
			return moved, false, err
		}
		if !whole {
			break
		}
	}
	return moved, false, nil
}

// fillPipe moves up to limit bytes from s's socket into the empty pipe p,
// waiting for the socket to have some; the end of the stream is
// io.ErrUnexpectedEOF (the caller wants more).
func (s *Socket) fillPipe(nc net.Conn, p *splicePipe, limit int64) error {
	o := &s.r
	o.mu.Lock()
	defer o.mu.Unlock()
	p.limit, p.got, p.errno = int(limit), 0, 0
	err := s.rc.Read(p.fill)
	p.n += p.got
	o.errno = p.errno
	switch err = o.result(nc, "read", err); {
	case err != nil:
		return err
	case p.got == 0:
		return io.ErrUnexpectedEOF
	}
	return nil
}

// fillIO is one try of fillPipe's on the socket fd: false to wait for
// bytes.
func (p *splicePipe) fillIO(fd uintptr) bool {
	var e syscall.Errno
	p.got, e = splice(fd, uintptr(p.w), p.limit)
	if e == syscall.EAGAIN {
		return false
	}
	p.errno = e
	return true
}

// drainPipe writes what pipe p holds to s's socket, after the bytes held
// on s, waiting for room as a write does; it returns the bytes of the
// pipe written.
func (s *Socket) drainPipe(nc net.Conn, p *splicePipe) (int64, error) {
	o := &s.w
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := s.flushLocked(nc); err != nil {
		return 0, err
	}
	p.moved, p.errno = 0, 0
	err := s.rc.Write(p.drain)
	o.errno = p.errno
	splicedBytes.Add(p.moved)
	return p.moved, o.result(nc, "write", err)
}

// drainIO is one try of drainPipe's on the socket fd: false to wait for
// room.
func (p *splicePipe) drainIO(fd uintptr) bool {
	for p.n > 0 {
		r, e := splice(uintptr(p.r), fd, p.n)
		switch {
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			p.errno = e
			return true
		case r == 0: // cannot be with bytes in the pipe; never spin
			p.errno = syscall.EIO
			return true
		}
		p.n -= r
		p.moved += int64(r)
	}
	return true
}

// splice makes one splice(2) call of up to n bytes from fd in to fd out,
// again when a signal interrupts it; it moved nothing when it fails.
func splice(in, out uintptr, n int) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, in, 0, out, 0, uintptr(n), spliceFlags)
		switch e {
		case 0:
			return int(r), 0
		case syscall.EINTR:
		default:
			return 0, e // r is -1 then, which no count may take
		}
	}
}
