// Package testlog gives tests loggers they can wait on: New logs to the
// test's output and also hands each record's message to a channel, which
// Wait reads until a given message arrives. Buffer is a log sink the test
// reads while the code under test writes it.
//
// It is for tests only.
package testlog

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testrun"
)

// New returns a logger that writes every record, from debug up, to the
// test's output. When msgs is non-nil it also sends each record's message
// to msgs without blocking: a message that does not fit is dropped, so a
// test that stops reading never blocks the code under test. The logger is
// safe for concurrent use.
func New(t testing.TB, msgs chan<- string) *slog.Logger {
	h := slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(&handler{Handler: h, msgs: msgs})
}

// handler is a slog.Handler that also sends each record's message to msgs
// (when non-nil) before handing the record on.
type handler struct {
	slog.Handler
	msgs chan<- string
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if h.msgs != nil {
		select {
		case h.msgs <- r.Message:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(as), msgs: h.msgs}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), msgs: h.msgs}
}

// Wait reads msgs (fed by a logger from New) until the message msg arrives,
// skipping every other message. It fails the test (t.Fatalf) when msg does
// not arrive within testrun.Timeout.
func Wait(t testing.TB, msgs <-chan string, msg string) {
	t.Helper()
	deadline := time.After(testrun.Timeout)
	for {
		select {
		case m := <-msgs:
			if m == msg {
				return
			}
		case <-deadline:
			t.Fatalf("timed out after %v waiting for log %q", testrun.Timeout, msg)
		}
	}
}

// Buffer is a bytes.Buffer safe for concurrent use: a log sink that the
// code under test writes from its goroutines while the test reads it. The
// zero value is an empty Buffer ready to use. A Buffer must not be copied
// after first use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
