package source_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/gateway/source"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testrun"
)

// wait bounds every wait for a signal in these tests.
const wait = testrun.Timeout

// spec returns a valid generation spec whose upstream is named after n.
func spec(n int) json.RawMessage {
	name := fmt.Sprintf("u%d", n)
	return spectest.New().Upstream(name, fmt.Sprintf("127.0.0.1:%d", 9000+n)).Route("web", "", name).JSON()
}

// publishSpec stores js as a new generation.
func publishSpec(t testing.TB, s *db.Store, js json.RawMessage) apiv1.Generation {
	t.Helper()
	g, err := s.Publish(context.Background(), db.PublishParams{Spec: js, Action: apiv1.ActionCreate, Author: "test", Message: "test"})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return g
}

// publish stores spec(n) as a new generation.
func publish(t *testing.T, s *db.Store, n int) apiv1.Generation {
	t.Helper()
	return publishSpec(t, s, spec(n))
}

// follow runs a db.Listener on db.NotifyChannel that notifies src on every
// (re)connect and every notification, as a process does, until the test
// ends. It returns a channel that receives once per (re)connect.
func follow(t *testing.T, url string, src *source.Database) <-chan struct{} {
	t.Helper()
	connects := make(chan struct{}, 100)
	l := &db.Listener{
		ConnString: url,
		Channels:   []string{db.NotifyChannel},
		OnConnect: func(context.Context) error {
			src.Notify()
			connects <- struct{}{}
			return nil
		},
		OnNotify: func(string, string) { src.Notify() },
		Logger:   testlog.New(t, nil),
	}
	testrun.Background(t, l.Run)
	return connects
}

// safeList is a slice appended to from several goroutines.
type safeList[T any] struct {
	mu    sync.Mutex
	items []T
}

func (l *safeList[T]) add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, v)
}

func (l *safeList[T]) snapshot() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.items...)
}
