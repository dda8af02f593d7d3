package proxy

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestSplicePipesKept: a pipe given back empty is kept for the next
// splice, up to maxIdlePipes; one with bytes in it is closed.
func TestSplicePipesKept(t *testing.T) {
	p, err := getPipe()
	if err != nil {
		t.Fatal(err)
	}
	putPipe(p)
	q, err := getPipe()
	if err != nil {
		t.Fatal(err)
	}
	if q != p {
		t.Fatalf("the pipe given back empty was not the one taken next")
	}
	q.n = 1 // as a splice that failed halfway leaves it
	putPipe(q)
	pipes.Lock()
	kept := false
	for _, f := range pipes.free {
		kept = kept || f == q
	}
	pipes.Unlock()
	if kept {
		t.Fatal("a pipe with bytes in it was kept")
	}

	// No more than maxPipes open at once: past it, none is to be had
	// (the answer is copied), until one is closed.
	// Nothing else splices meanwhile: this test is not parallel.
	var taken []*splicePipe
	for {
		p, err := getPipe()
		if err != nil {
			if !errors.Is(err, errNoPipe) || len(taken) != maxPipes {
				t.Fatalf("after %d pipes: %v; want errNoPipe after %d", len(taken), err, maxPipes)
			}
			break
		}
		if taken = append(taken, p); len(taken) > maxPipes {
			t.Fatalf("%d pipes open; want at most %d", len(taken), maxPipes)
		}
	}
	for _, p := range taken {
		p.n = 1 // closed, not kept
		putPipe(p)
	}
	if p, err := getPipe(); err != nil {
		t.Fatalf("a pipe once others were closed: %v", err)
	} else {
		putPipe(p)
	}
}

// TestPipeLimit: pipes take at most a quarter of the process's file
// descriptors, and never more than 1,024 of them.
func TestPipeLimit(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{
		{0, 0}, {7, 0}, {63, 7}, {1024, 128}, {8192, 1024}, {20000, 1024}, {1 << 40, 1024},
	} {
		if got := pipeLimit(tc.nofile); got != tc.want {
			t.Errorf("pipeLimit(%d) = %d; want %d", tc.nofile, got, tc.want)
		}
	}
	if maxPipes < 1 || maxPipes > 1024 {
		t.Errorf("maxPipes = %d for this process; want 1..1024", maxPipes)
	}
}

// TestSpliceAllocatesNothing: a splice with a kept pipe allocates
// nothing: its fill and drain are the pipe's own method values, their
// results in the pipe. Not parallel: AllocsPerRun.
func TestSpliceAllocatesNothing(t *testing.T) {
	sp := newSplicePair(t)
	const n = 16 << 10 // fits the sockets' buffers: no goroutine needed
	out, in := make([]byte, n), make([]byte, n)
	for i := range out {
		out[i] = byte(i)
	}
	run := func() {
		if _, err := sp.srcPeer.Write(out); err != nil {
			t.Fatal(err)
		}
		if moved, _, err := sp.ds.SpliceFrom(sp.dst, &sp.ss, sp.src, n, nil); moved != n || err != nil {
			t.Fatalf("SpliceFrom: %d moved, %v; want %d", moved, err, n)
		}
		if _, err := io.ReadFull(sp.dstPeer, in); err != nil || !bytes.Equal(in, out) {
			t.Fatalf("the bytes spliced differ (%v)", err)
		}
	}
	run() // takes a pipe, kept after
	if allocs := testing.AllocsPerRun(50, run); allocs > 0 {
		t.Errorf("a splice allocates %v times; want none", allocs)
	}
}
