package proxy

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
	"time"
)

// deadlines records the read deadlines set on it.
type deadlines struct{ read []time.Time }

func (d *deadlines) SetReadDeadline(t time.Time) error { d.read = append(d.read, t); return nil }
func (d *deadlines) SetWriteDeadline(time.Time) error  { return nil }

// TestStallBodyMovesDeadlineSeldom: a body read in many pieces at once
// sets its deadline once, at least stall ahead; every read starts with
// at least stall left before the deadline.
func TestStallBodyMovesDeadlineSeldom(t *testing.T) {
	t.Parallel()
	const stall = time.Minute
	dl := &deadlines{}
	body := bytes.Repeat([]byte("x"), 64<<10)
	b := &StallBody{R: iotest.OneByteReader(bytes.NewReader(body)), DL: dl, Stall: stall}
	start := time.Now()
	got, err := io.ReadAll(io.LimitReader(b, 4096)) // 4,096 reads of a byte
	took := time.Since(start)
	if err != nil || len(got) != 4096 {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if len(dl.read) != 1 {
		t.Fatalf("%d deadlines set over 4,096 reads, want 1", len(dl.read))
	}
	if left := dl.read[0].Sub(start); left < stall || left > stall+stall/16+took {
		t.Errorf("deadline %v ahead, want stall (%v) to stall and a sixteenth", left, stall)
	}
}

// TestStallBodyMovesDeadlineOnTime: once less than stall is left before
// the deadline set, the next read moves it stall and a sixteenth ahead.
func TestStallBodyMovesDeadlineOnTime(t *testing.T) {
	t.Parallel()
	const stall = 160 * time.Millisecond
	dl := &deadlines{}
	b := &StallBody{R: bytes.NewReader(bytes.Repeat([]byte("x"), 8)), DL: dl, Stall: stall}
	var p [1]byte
	if _, err := b.Read(p[:]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stall / 16 * 2) // more than the sixteenth ahead has gone
	before := time.Now()
	if _, err := b.Read(p[:]); err != nil {
		t.Fatal(err)
	}
	if len(dl.read) != 2 {
		t.Fatalf("%d deadlines set, want 2 (the second read found less than stall left)", len(dl.read))
	}
	if left := dl.read[1].Sub(before); left < stall {
		t.Errorf("the moved deadline is %v ahead, want at least stall (%v)", left, stall)
	}
}
