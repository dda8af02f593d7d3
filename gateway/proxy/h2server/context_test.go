package h2server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/dwara/dwara/internal/testrun"
)

// TestStreamContext checks a stream context against context's contract:
// the parent's values, Err and Done only after cancel, an AfterFunc
// stopped before the cancel never runs, one not stopped runs once, one
// registered after the cancel runs at once, and stop reports which.
func TestStreamContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	x := &streamContext{parent: context.WithValue(context.Background(), key{}, "v")}
	if got := x.Value(key{}); got != "v" {
		t.Errorf("Value = %v, want the parent's v", got)
	}
	if err := x.Err(); err != nil {
		t.Fatalf("Err before cancel = %v", err)
	}
	done := x.Done()
	select {
	case <-done:
		t.Fatal("Done is closed before cancel")
	default:
	}
	ran := make(chan string, 4)
	stopped := x.AfterFunc(func() { ran <- "stopped" })
	kept := x.AfterFunc(func() { ran <- "kept" })
	if !stopped() {
		t.Error("stop before cancel = false, want true")
	}
	if stopped() {
		t.Error("a second stop = true, want false")
	}
	x.cancel()
	x.cancel() // a second cancel does nothing
	testrun.Recv(t, done, "Done's close")
	if !errors.Is(x.Err(), context.Canceled) {
		t.Errorf("Err after cancel = %v, want context.Canceled", x.Err())
	}
	if got := testrun.Recv(t, ran, "the kept AfterFunc"); got != "kept" {
		t.Errorf("ran %q, want kept", got)
	}
	if kept() {
		t.Error("stop after the function ran = true, want false")
	}
	late := x.AfterFunc(func() { ran <- "late" })
	if got := testrun.Recv(t, ran, "the AfterFunc registered after cancel"); got != "late" {
		t.Errorf("ran %q, want late", got)
	}
	if late() {
		t.Error("stop of a function registered after cancel = true, want false")
	}
	select {
	case got := <-ran:
		t.Errorf("%q ran too", got)
	default:
	}
	// Done asked for the first time after the cancel is closed too.
	y := &streamContext{parent: context.Background()}
	y.cancel()
	testrun.Recv(t, y.Done(), "Done of a context cancelled before Done was asked for")
}

// TestStreamContextFollowsConnContext checks that a handler's context
// ends when the context of its connection (ConnContext's) does, and that
// context.AfterFunc on a request's context runs when its stream ends.
func TestStreamContextFollowsConnContext(t *testing.T) {
	t.Parallel()
	connCtx, cancelConn := context.WithCancel(context.Background())
	defer cancelConn()
	started, ended, after := make(chan struct{}, 1), make(chan error, 1), make(chan struct{}, 1)
	ts := startServer(t, &Server{
		ConnContext: func(context.Context, net.Conn) context.Context { return connCtx },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			context.AfterFunc(r.Context(), func() { after <- struct{}{} })
			started <- struct{}{}
			<-r.Context().Done()
			ended <- r.Context().Err()
		})})
	c := ts.client(t)
	go func() {
		if resp, err := c.Get(ts.url("/wait")); err == nil {
			_ = resp.Body.Close()
		}
	}()
	testrun.Recv(t, started, "the handler's start")
	cancelConn()
	if err := testrun.Recv(t, ended, "the end of the handler's context"); !errors.Is(err, context.Canceled) {
		t.Errorf("the handler's context ended with %v, want context.Canceled", err)
	}
	testrun.Recv(t, after, "the AfterFunc of the request's context")
}
