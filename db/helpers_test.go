package db_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testrun"
)

// spec returns a small generation spec whose content depends on n.
func spec(n int) json.RawMessage {
	name := fmt.Sprintf("u%d", n)
	return spectest.New().Upstream(name, fmt.Sprintf("127.0.0.1:%d", 9000+n)).Route("s", "/", name).JSON()
}

func ptr[T any](v T) *T { return &v }

func publish(t *testing.T, s *db.Store, n int) apiv1.Generation {
	t.Helper()
	g, err := s.Publish(context.Background(), db.PublishParams{Spec: spec(n), Action: apiv1.ActionCreate, Author: "test", Message: fmt.Sprint("publish ", n)})
	if err != nil {
		t.Fatalf("publish %d: %v", n, err)
	}
	return g
}

// note is one received notification.
type note struct{ channel, payload string }

// listen runs a Listener on channels until the test ends. It returns the
// notifications and a channel that receives once per (re)connect.
func listen(t *testing.T, url string, channels ...string) (<-chan note, <-chan struct{}) {
	t.Helper()
	notes := make(chan note, 1000)
	connects := make(chan struct{}, 100)
	l := &db.Listener{
		ConnString: url,
		Channels:   channels,
		OnConnect: func(context.Context) error {
			connects <- struct{}{}
			return nil
		},
		OnNotify: func(channel, payload string) { notes <- note{channel, payload} },
		Logger:   testlog.New(t, nil),
	}
	testrun.Background(t, l.Run)
	return notes, connects
}
