package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

func TestPublishNotifies(t *testing.T) {
	t.Parallel()
	s, url := dbtest.NewStore(t)
	ctx := context.Background()
	notes, connects := listen(t, url, db.NotifyChannel)
	testrun.Recv(t, connects, "listener connect")

	g := publish(t, s, 1)
	if n := testrun.Recv(t, notes, "notification of generation 1"); n != (note{db.NotifyChannel, "1"}) || g.ID != 1 {
		t.Fatalf("notification = %+v, want %s 1", n, db.NotifyChannel)
	}

	// Failed publishes roll back and notify nothing: the next notification
	// is the next successful publish.
	if _, err := s.Publish(ctx, db.PublishParams{Spec: spec(2), IfMatch: ptr(int64(0))}); !errors.Is(err, db.ErrPreconditionFailed) {
		t.Fatalf("publish with stale if-match = %v, want ErrPreconditionFailed", err)
	}
	if _, err := s.Publish(ctx, db.PublishParams{Spec: json.RawMessage(`"not an object"`)}); err == nil {
		t.Fatal("publish of a non-object spec succeeded")
	}
	publish(t, s, 2)
	if n := testrun.Recv(t, notes, "notification of generation 2"); n.payload != "2" {
		t.Fatalf("notification after failed publishes = %+v, want payload 2", n)
	}
}

func TestListenerChannelsAndReconnect(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	notes, connects := listen(t, url, "alpha", "Beta channel")
	testrun.Recv(t, connects, "first connect")

	dbtest.Exec(t, url, `SELECT pg_notify('alpha', 'a1'), pg_notify('Beta channel', 'b1'), pg_notify('gamma', 'g1')`)
	if n := testrun.Recv(t, notes, "alpha"); n != (note{"alpha", "a1"}) {
		t.Errorf("first notification = %+v, want alpha a1", n)
	}
	if n := testrun.Recv(t, notes, "Beta channel"); n != (note{"Beta channel", "b1"}) {
		t.Errorf("second notification = %+v, want Beta channel b1", n)
	}

	if k := dbtest.KillListeners(t, url); k != 1 {
		t.Fatalf("terminated %d listener backends, want 1", k)
	}
	testrun.Recv(t, connects, "reconnect after the backend was terminated")
	dbtest.Exec(t, url, `SELECT pg_notify('alpha', 'a2')`)
	if n := testrun.Recv(t, notes, "alpha after reconnect"); n != (note{"alpha", "a2"}) {
		t.Errorf("notification after reconnect = %+v, want alpha a2 (gamma must never arrive)", n)
	}
}

func TestListenerOnConnectErrorReconnects(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	calls := make(chan int, 100)
	n := 0
	l := &db.Listener{
		ConnString: url,
		Channels:   []string{"c"},
		OnConnect: func(context.Context) error {
			n++
			calls <- n
			if n == 1 {
				return errors.New("first load failed")
			}
			return nil
		},
		OnNotify: func(string, string) {},
		Logger:   testlog.New(t, nil),
	}
	testrun.Background(t, l.Run)
	testrun.Recv(t, calls, "first OnConnect")
	if got := testrun.Recv(t, calls, "OnConnect after the failed one"); got != 2 {
		t.Errorf("OnConnect call = %d, want 2", got)
	}
}

func TestListenerRetriesWhileUnreachable(t *testing.T) {
	t.Parallel()
	msgs := make(chan string, 100)
	l := &db.Listener{
		// Connections are refused.
		ConnString: fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", testnet.ClosedAddr(t)),
		Channels:   []string{"c"},
		OnConnect:  func(context.Context) error { t.Error("OnConnect called without a server"); return nil },
		OnNotify:   func(string, string) {},
		Logger:     testlog.New(t, msgs),
	}
	stop := testrun.Background(t, l.Run)
	testlog.Wait(t, msgs, "listener connect failed")
	testlog.Wait(t, msgs, "listener connect failed")
	stop() // Run must return nil after cancel
}

func TestListenerMisconfigured(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		l    *db.Listener
	}{
		{name: "no channels", l: &db.Listener{ConnString: "postgres://127.0.0.1/x", OnNotify: func(string, string) {}}},
		{name: "nil OnNotify", l: &db.Listener{ConnString: "postgres://127.0.0.1/x", Channels: []string{"c"}}},
		{name: "bad conn string", l: &db.Listener{ConnString: "postgres://%zz", Channels: []string{"c"}, OnNotify: func(string, string) {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), testrun.Timeout)
			defer cancel()
			start := time.Now()
			if err := tt.l.Run(ctx); err == nil {
				t.Fatal("Run = nil, want a configuration error")
			}
			if ctx.Err() != nil {
				t.Fatalf("Run returned only after %v, want at once", time.Since(start))
			}
		})
	}
}

// TestListenerNoticesLostNotifications: a listener whose probe does not
// come back (as through a pooler in transaction mode) says so once, is
// Deaf, and reconnects; a working one probes while idle and stays hearing.
func TestListenerNoticesLostNotifications(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	msgs := make(chan string, 100)
	log := testlog.New(t, msgs)
	l := &db.Listener{ConnString: url, Channels: []string{"c"}, OnNotify: func(string, string) {}, Logger: log}
	db.ProbeElsewhere(l, 50*time.Millisecond, "nobody_listens_here")
	stop := testrun.Background(t, l.Run)
	testlog.Wait(t, msgs, db.MsgDeaf)
	if !l.Deaf() {
		t.Fatal("Deaf() = false after a lost probe")
	}
	stop()

	heard := &db.Listener{ConnString: url, Channels: []string{"c"}, OnNotify: func(string, string) {}, Logger: log}
	db.ProbeElsewhere(heard, 20*time.Millisecond, db.ProbeChannel)
	connected := make(chan struct{}, 10)
	heard.OnConnect = func(context.Context) error { connected <- struct{}{}; return nil }
	testrun.Background(t, heard.Run)
	testrun.Recv(t, connected, "connect")
	// Many probe rounds pass (each 20 ms idle); none may lose the
	// connection, which would connect again.
	select {
	case <-connected:
		t.Fatal("a working listener reconnected: its probe was lost")
	case <-time.After(500 * time.Millisecond): // a bounded look for something that must not happen
	}
	if heard.Deaf() {
		t.Fatal("a working listener is Deaf")
	}
}
