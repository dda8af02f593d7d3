package testlog_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/dwara/dwara/internal/testlog"
)

func TestNewSendsMessages(t *testing.T) {
	t.Parallel()
	msgs := make(chan string, 2)
	log := testlog.New(t, msgs).With("k", "v").WithGroup("g")
	log.Debug("first")
	log.Info("second")
	log.Warn("third: dropped, msgs is full")
	testlog.Wait(t, msgs, "second")
	if len(msgs) != 0 {
		t.Errorf("%d messages left after Wait skipped to the second", len(msgs))
	}
	testlog.New(t, nil).Info("a nil msgs only logs")
}

func TestBuffer(t *testing.T) {
	t.Parallel()
	var b testlog.Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { fmt.Fprintf(&b, "line %d\n", i) })
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 4 {
		t.Errorf("buffer holds %d lines, want 4: %q", n, b.String())
	}
}
