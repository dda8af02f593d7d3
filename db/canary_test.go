package db_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testrun"
)

// lockCanary takes the canary runner lock of s, failing the test when it
// cannot; the lock is released when the test ends.
func lockCanary(t *testing.T, s *db.Store) *db.CanaryLock {
	t.Helper()
	l, err := s.TryCanaryLock(context.Background())
	if err != nil || l == nil {
		t.Fatalf("TryCanaryLock = %v, %v; want the lock", l, err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

// controllerAction is a controller event of service in generation moving
// the canary from one weight to another.
func controllerAction(generation int64, service, action string, from, to int) apiv1.CanaryEvent {
	return apiv1.CanaryEvent{GenerationID: generation, Service: service, FromWeight: from, ToWeight: to,
		Action: action, Reason: action + " by the test", InstanceID: "runner-1"}
}

// record records e through l with the configured canary weight, failing
// the test unless it was recorded.
func record(t *testing.T, l *db.CanaryLock, e apiv1.CanaryEvent, configured int) apiv1.CanaryEvent {
	t.Helper()
	stored, ok, err := l.Record(context.Background(), e, configured)
	if err != nil || !ok {
		t.Fatalf("Record(%+v) = %v, %v; want recorded", e, ok, err)
	}
	return stored
}

// connectTest opens a connection of its own to the database at url, closed
// when the test ends.
func connectTest(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// windowRow is one row of canary_windows as stored.
type windowRow struct {
	second   time.Time
	requests int64
	errors   int64
	latency  string
}

// windowRows returns the rows of instance, oldest first.
func windowRows(t *testing.T, s *db.Store, instance string) []windowRow {
	t.Helper()
	conn := connectTest(t, s.ConnString())
	rows, err := conn.Query(context.Background(), `
		SELECT second, requests, errors, latency::text FROM canary_windows
		WHERE instance_id = $1 ORDER BY second`, instance)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []windowRow
	for rows.Next() {
		var r windowRow
		if err := rows.Scan(&r.second, &r.requests, &r.errors, &r.latency); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFlushCanaryWindowsAddsUp(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()

	first := []db.CanaryWindowRow{
		{Generation: 1, Service: "api", Version: db.VersionBaseline, Requests: 10, Errors: 1, Latency: [][2]uint64{{3, 4}, {9, 6}}},
		{Generation: 1, Service: "api", Version: db.VersionCanary, Requests: 0}, // skipped
	}
	second := []db.CanaryWindowRow{
		{Generation: 1, Service: "api", Version: db.VersionBaseline, Requests: 5, Errors: 2, Latency: [][2]uint64{{1, 1}, {9, 2}, {12, 2}}},
	}
	// Two flushes add up when they land in the same second of the
	// database's clock; a pair that straddles a second is retried under
	// another instance name.
	for attempt := range 5 {
		instance := "gw-" + string(rune('a'+attempt))
		for _, rows := range [][]db.CanaryWindowRow{first, second} {
			if err := s.FlushCanaryWindows(ctx, instance, rows); err != nil {
				t.Fatalf("flush: %v", err)
			}
		}
		got := windowRows(t, s, instance)
		if len(got) == 2 {
			continue // the flushes straddled a second
		}
		if len(got) != 1 {
			t.Fatalf("%d rows after two flushes: %+v", len(got), got)
		}
		r := got[0]
		if r.requests != 15 || r.errors != 3 || r.latency != "[[1, 1], [3, 4], [9, 8], [12, 2]]" {
			t.Errorf("merged row = %+v; want 15 requests, 3 errors, latency [[1, 1], [3, 4], [9, 8], [12, 2]]", r)
		}
		if !r.second.Equal(r.second.Truncate(time.Second)) {
			t.Errorf("second %v is not a whole second", r.second)
		}
		return
	}
	t.Fatal("every pair of flushes straddled a second")
}

func TestFlushCanaryWindowsRefusals(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	err := s.FlushCanaryWindows(ctx, "gw", []db.CanaryWindowRow{{Generation: 1, Service: "api", Version: "stable", Requests: 1}})
	if err == nil {
		t.Error("a row of version \"stable\" was accepted")
	}
	// Nothing to store is not an error, and stores nothing.
	if err := s.FlushCanaryWindows(ctx, "gw", nil); err != nil {
		t.Errorf("flush of no rows: %v", err)
	}
	if err := s.FlushCanaryWindows(ctx, "gw", []db.CanaryWindowRow{{Generation: 1, Service: "api", Version: db.VersionCanary}}); err != nil {
		t.Errorf("flush of an empty row: %v", err)
	}
	twice := []db.CanaryWindowRow{{Generation: 1, Service: "api", Version: db.VersionCanary, Requests: 1},
		{Generation: 1, Service: "api", Version: db.VersionCanary, Requests: 2}}
	if err := s.FlushCanaryWindows(ctx, "gw", twice); err == nil {
		t.Error("two rows of one version were accepted")
	}
	if rows := windowRows(t, s, "gw"); len(rows) != 0 {
		t.Errorf("stored %+v", rows)
	}
}

func TestCanaryWindow(t *testing.T) {
	t.Parallel()
	s, url := dbtest.NewStore(t)
	ctx := context.Background()
	const window = 10 * time.Minute

	// Empty: zero totals and the database's time.
	b, c, now, err := s.CanaryWindow(ctx, 1, "api", window)
	if err != nil || b.Requests != 0 || c.Requests != 0 || b.Latency != nil || c.Latency != nil || now.IsZero() {
		t.Fatalf("empty window = %+v, %+v, %v, %v", b, c, now, err)
	}

	flush := func(instance string, rows ...db.CanaryWindowRow) {
		t.Helper()
		if err := s.FlushCanaryWindows(ctx, instance, rows); err != nil {
			t.Fatalf("flush %s: %v", instance, err)
		}
	}
	flush("gw-1",
		db.CanaryWindowRow{Generation: 1, Service: "api", Version: db.VersionBaseline, Requests: 100, Errors: 1, Latency: [][2]uint64{{5, 60}, {7, 40}}},
		db.CanaryWindowRow{Generation: 1, Service: "api", Version: db.VersionCanary, Requests: 10, Errors: 2, Latency: [][2]uint64{{7, 10}}},
		// Other generations and services are not read.
		db.CanaryWindowRow{Generation: 2, Service: "api", Version: db.VersionCanary, Requests: 1000, Errors: 1000, Latency: [][2]uint64{{1, 1000}}},
		db.CanaryWindowRow{Generation: 1, Service: "web", Version: db.VersionCanary, Requests: 1000, Errors: 1000, Latency: [][2]uint64{{1, 1000}}},
	)
	flush("gw-2",
		db.CanaryWindowRow{Generation: 1, Service: "api", Version: db.VersionBaseline, Requests: 50, Errors: 0, Latency: [][2]uint64{{2, 10}, {7, 40}}},
	)
	// Rows well inside and just outside the window, by the database's
	// clock: the one outside only gets older while the test runs, and the
	// one inside stays inside unless the test takes five minutes.
	dbtest.Exec(t, url, `
		INSERT INTO canary_windows (generation_id, service, second, instance_id, version, requests, errors, latency)
		VALUES (1, 'api', date_trunc('second', now()) - interval '5 minutes', 'gw-old', 'canary', 20, 1, '[[3, 20]]'),
		       (1, 'api', date_trunc('second', now()) - interval '10 minutes', 'gw-old', 'canary', 7000, 7000, '[[1, 7000]]'),
		       (1, 'api', date_trunc('second', now()) - interval '1 hour', 'gw-old', 'baseline', 9000, 9000, '[[1, 9000]]')`)

	b, c, now, err = s.CanaryWindow(ctx, 1, "api", window)
	if err != nil {
		t.Fatal(err)
	}
	wantB := db.CanaryTotals{Requests: 150, Errors: 1, Latency: [][2]uint64{{2, 10}, {5, 60}, {7, 80}}}
	wantC := db.CanaryTotals{Requests: 30, Errors: 3, Latency: [][2]uint64{{3, 20}, {7, 10}}}
	if !equalTotals(b, wantB) || !equalTotals(c, wantC) {
		t.Errorf("window:\n baseline %+v, want %+v\n canary %+v, want %+v", b, wantB, c, wantC)
	}
	if now.IsZero() {
		t.Error("no time of reading")
	}

	// A longer window reaches the older rows.
	b, c, _, err = s.CanaryWindow(ctx, 1, "api", 2*time.Hour)
	if err != nil || b.Requests != 9150 || c.Requests != 7030 || c.Latency[0] != [2]uint64{1, 7000} {
		t.Errorf("2h window = %+v, %+v, %v", b, c, err)
	}
	// Other generation, other service.
	b, c, _, err = s.CanaryWindow(ctx, 2, "api", window)
	if err != nil || b.Requests != 0 || b.Latency != nil || c.Requests != 1000 || !slices.Equal(c.Latency, [][2]uint64{{1, 1000}}) {
		t.Errorf("generation 2 window = %+v, %+v, %v", b, c, err)
	}
	b, c, _, err = s.CanaryWindow(ctx, 1, "nope", window)
	if err != nil || b.Requests != 0 || c.Requests != 0 {
		t.Errorf("window of an unknown service = %+v, %+v, %v", b, c, err)
	}

	// Pruning keeps what is younger than the retention.
	n, err := s.PruneCanaryWindows(ctx, 30*time.Minute)
	if err != nil || n != 1 {
		t.Errorf("prune 30m = %d, %v; want 1 (the row an hour old)", n, err)
	}
	if n, err := s.PruneCanaryWindows(ctx, 30*time.Minute); err != nil || n != 0 {
		t.Errorf("prune again = %d, %v; want 0", n, err)
	}
	if n, err := s.PruneCanaryWindows(ctx, 7*time.Minute); err != nil || n != 1 {
		t.Errorf("prune 7m = %d, %v; want 1 (the row ten minutes old)", n, err)
	}
	b, c, _, err = s.CanaryWindow(ctx, 1, "api", 2*time.Hour)
	if err != nil || !equalTotals(b, wantB) || !equalTotals(c, wantC) {
		t.Errorf("after pruning the window is %+v, %+v, %v", b, c, err)
	}
}

func equalTotals(a, b db.CanaryTotals) bool {
	return a.Requests == b.Requests && a.Errors == b.Errors && slices.Equal(a.Latency, b.Latency)
}

func TestCanaryRecord(t *testing.T) {
	t.Parallel()
	s, url := dbtest.NewStore(t)
	ctx := context.Background()
	notes := dbtest.Watch(t, url, db.CanaryNotifyChannel)
	publish(t, s, 1)
	l := lockCanary(t, s)

	// The first action starts from the configured weight.
	e := controllerAction(1, "api", apiv1.CanaryPromote, 5, 10)
	e.Baseline = &apiv1.CanaryFigures{Requests: 1000, Errors: 3, ErrorRate: 0.003, LatencyP99: 0.012}
	e.Canary = &apiv1.CanaryFigures{Requests: 50, Errors: 0, ErrorRate: 0, LatencyP99: 0.010}
	e.PValue = ptr(0.42)
	stored := record(t, l, e, 5)
	if stored.ID == 0 || stored.CreatedAt.IsZero() || stored.FromWeight != 5 || stored.ToWeight != 10 ||
		*stored.Baseline != *e.Baseline || *stored.Canary != *e.Canary || *stored.PValue != 0.42 ||
		stored.InstanceID != "runner-1" || stored.Actor != "" || stored.Reason != e.Reason {
		t.Errorf("stored %+v", stored)
	}
	got, err := db.ParseCanaryEvent(testrun.Recv(t, notes, "canary notification"))
	if err != nil || got.ID != stored.ID || got.Action != apiv1.CanaryPromote || got.ToWeight != 10 ||
		got.Canary == nil || *got.Canary != *e.Canary || !got.CreatedAt.Equal(stored.CreatedAt) {
		t.Errorf("notification %+v, %v; want %+v", got, err, stored)
	}

	// A from weight that is not the weight in force is not recorded.
	for _, from := range []int{5, 15} {
		if ev, ok, err := l.Record(ctx, controllerAction(1, "api", apiv1.CanaryPromote, from, from+5), 5); err != nil || ok || ev.ID != 0 {
			t.Errorf("Record from %d = %+v, %v, %v; want not recorded", from, ev, ok, err)
		}
	}
	// Each service has its own weight in force.
	record(t, l, controllerAction(1, "web", apiv1.CanarySevereRollback, 50, 0), 50)
	record(t, l, controllerAction(1, "api", apiv1.CanaryRollback, 10, 5), 5)

	// A generation that is not the newest is not recorded.
	publish(t, s, 2)
	if _, ok, err := l.Record(ctx, controllerAction(1, "api", apiv1.CanaryPromote, 5, 10), 5); err != nil || ok {
		t.Errorf("Record in an old generation = %v, %v; want not recorded", ok, err)
	}
	// The new generation starts again from its configured weight.
	if _, ok, err := l.Record(ctx, controllerAction(2, "api", apiv1.CanaryPromote, 5, 10), 20); err != nil || ok {
		t.Errorf("Record from 5 with 20 configured = %v, %v; want not recorded", ok, err)
	}
	last := record(t, l, controllerAction(2, "api", apiv1.CanaryPromote, 20, 25), 20)
	// Nor is a generation that does not exist yet.
	if _, ok, err := l.Record(ctx, controllerAction(3, "api", apiv1.CanaryPromote, 20, 25), 20); err != nil || ok {
		t.Errorf("Record in generation 3 = %v, %v; want not recorded", ok, err)
	}
	// Only controller actions are recorded.
	if _, _, err := l.Record(ctx, controllerAction(2, "api", apiv1.CanaryPause, 25, 25), 20); err == nil {
		t.Error("Record of a pause succeeded")
	}

	// Exactly the recorded events were announced, in order.
	for _, want := range []string{"web", "api", "api"} {
		e, err := db.ParseCanaryEvent(testrun.Recv(t, notes, "canary notification"))
		if err != nil || e.Service != want {
			t.Fatalf("notification %+v, %v; want one of %s", e, err, want)
		}
		if e.ID == last.ID {
			break
		}
	}
	select {
	case p := <-notes:
		t.Errorf("unexpected notification %s", p)
	default:
	}
	events, err := s.ListCanaryEvents(ctx, "", 0, 100, 0)
	if err != nil || len(events) != 4 || events[0].ID != last.ID || events[3].ID != stored.ID {
		t.Errorf("events %+v, %v; want the four recorded, newest first", events, err)
	}
}

func TestCanaryLockIsExclusive(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	other, _ := dbtest.NewStore(t) // another database: its own lock
	ctx := context.Background()

	first, err := s.TryCanaryLock(ctx)
	if err != nil || first == nil {
		t.Fatalf("first TryCanaryLock = %v, %v", first, err)
	}
	second, err := s.TryCanaryLock(ctx)
	if err != nil || second != nil {
		t.Fatalf("second TryCanaryLock while the first holds = %v, %v; want nil, nil", second, err)
	}
	elsewhere := lockCanary(t, other)
	if id, _, err := elsewhere.Newest(ctx); err != nil || id != 0 {
		t.Errorf("Newest of an empty database = %d, %v", id, err)
	}

	publish(t, s, 1)
	publish(t, s, 2)
	if id, now, err := first.Newest(ctx); err != nil || id != 2 || now.IsZero() {
		t.Errorf("Newest = %d, %v, %v; want 2", id, now, err)
	}
	first.Close(ctx)
	if _, _, err := first.Newest(ctx); err == nil {
		t.Error("Newest on a closed lock succeeded")
	}
	third := lockCanary(t, s)
	if id, _, err := third.Newest(ctx); err != nil || id != 2 {
		t.Errorf("Newest = %d, %v; want 2", id, err)
	}
}

func TestCanaryStates(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	publish(t, s, 1)
	l := lockCanary(t, s)

	states := func(gen int64) map[string]db.CanaryState {
		t.Helper()
		m, err := s.CanaryStates(ctx, gen)
		if err != nil {
			t.Fatalf("CanaryStates(%d): %v", gen, err)
		}
		onLock, err := l.States(ctx, gen)
		if err != nil {
			t.Fatalf("CanaryLock.States(%d): %v", gen, err)
		}
		if len(onLock) != len(m) {
			t.Errorf("the lock's states %+v differ from the store's %+v", onLock, m)
		}
		return m
	}
	if m := states(1); len(m) != 0 {
		t.Fatalf("states before any event = %+v", m)
	}

	record(t, l, controllerAction(1, "api", apiv1.CanaryPromote, 5, 10), 5)
	rb := record(t, l, controllerAction(1, "api", apiv1.CanaryRollback, 10, 5), 5)
	web := record(t, l, controllerAction(1, "web", apiv1.CanaryPromote, 0, 10), 0)
	m := states(1)
	api := m["api"]
	if !api.Transient || api.Weight != 5 || !api.LastAction.Equal(rb.CreatedAt) || api.Paused ||
		api.LastEvent == nil || api.LastEvent.ID != rb.ID {
		t.Errorf("api = %+v; want transient at 5 (back at the configured weight), last event %d", api, rb.ID)
	}
	if w := m["web"]; !w.Transient || w.Weight != 10 || w.LastEvent == nil || w.LastEvent.ID != web.ID {
		t.Errorf("web = %+v", w)
	}
	if _, ok := m["tri"]; ok || len(m) != 2 {
		t.Errorf("states = %+v; want api and web only", m)
	}

	// A pause is the newest event but not an action: the weight and the
	// time of the last action stay.
	pause, err := s.HoldCanary(ctx, 1, "api", true, 5, "alice", "investigating")
	if err != nil {
		t.Fatal(err)
	}
	api = states(1)["api"]
	if !api.Paused || !api.Transient || api.Weight != 5 || !api.LastAction.Equal(rb.CreatedAt) || api.LastEvent == nil || api.LastEvent.ID != pause.ID {
		t.Errorf("paused api = %+v", api)
	}

	// In the next generation nothing is transient and nothing happened
	// yet, but the hold lasts.
	publish(t, s, 2)
	m = states(2)
	if api := m["api"]; api.Transient || api.Weight != 0 || !api.LastAction.IsZero() || !api.Paused || api.LastEvent != nil {
		t.Errorf("api in generation 2 = %+v; want only paused", api)
	}
	if _, ok := m["web"]; ok {
		t.Errorf("web in generation 2 = %+v; want absent", m["web"])
	}
	resume, err := s.HoldCanary(ctx, 2, "api", false, 5, "bob", "")
	if err != nil {
		t.Fatal(err)
	}
	if api := states(2)["api"]; api.Paused || api.Transient || api.LastEvent == nil || api.LastEvent.ID != resume.ID {
		t.Errorf("resumed api = %+v", api)
	}
	// Generation 1 sees the resume too (a hold is not per generation), and
	// keeps its own last event.
	if api := states(1)["api"]; api.Paused || !api.Transient || api.LastEvent == nil || api.LastEvent.ID != pause.ID {
		t.Errorf("api in generation 1 after the resume = %+v", api)
	}
}

func TestHoldCanary(t *testing.T) {
	t.Parallel()
	s, url := dbtest.NewStore(t)
	ctx := context.Background()
	notes := dbtest.Watch(t, url, db.CanaryNotifyChannel)
	publish(t, s, 1)

	pause, err := s.HoldCanary(ctx, 1, "api", true, 15, "alice", "investigating")
	if err != nil {
		t.Fatal(err)
	}
	if pause.ID == 0 || pause.Action != apiv1.CanaryPause || pause.FromWeight != 15 || pause.ToWeight != 15 ||
		pause.Actor != "alice" || pause.Reason != "investigating" || pause.GenerationID != 1 ||
		pause.Baseline != nil || pause.Canary != nil || pause.PValue != nil {
		t.Errorf("pause = %+v", pause)
	}
	if got, err := db.ParseCanaryEvent(testrun.Recv(t, notes, "pause notification")); err != nil || got.ID != pause.ID || got.Actor != "alice" {
		t.Errorf("pause notification %+v, %v", got, err)
	}
	if _, err := s.HoldCanary(ctx, 1, "api", true, 15, "bob", ""); !errors.Is(err, db.ErrUnchanged) {
		t.Errorf("second pause = %v, want ErrUnchanged", err)
	}
	// Holds are per service.
	if _, err := s.HoldCanary(ctx, 1, "web", false, 0, "bob", ""); !errors.Is(err, db.ErrUnchanged) {
		t.Errorf("resume of a service never paused = %v, want ErrUnchanged", err)
	}
	resume, err := s.HoldCanary(ctx, 1, "api", false, 15, "bob", "fixed")
	if err != nil || resume.Action != apiv1.CanaryResume || resume.Actor != "bob" || resume.ID <= pause.ID {
		t.Fatalf("resume = %+v, %v", resume, err)
	}
	if got, err := db.ParseCanaryEvent(testrun.Recv(t, notes, "resume notification")); err != nil || got.ID != resume.ID {
		t.Errorf("resume notification %+v, %v", got, err)
	}
	if _, err := s.HoldCanary(ctx, 1, "api", false, 15, "bob", ""); !errors.Is(err, db.ErrUnchanged) {
		t.Errorf("second resume = %v, want ErrUnchanged", err)
	}

	// Only the newest generation can be held.
	publish(t, s, 2)
	for _, gen := range []int64{1, 3} {
		if _, err := s.HoldCanary(ctx, gen, "api", true, 15, "alice", ""); !errors.Is(err, db.ErrPreconditionFailed) {
			t.Errorf("pause in generation %d = %v, want ErrPreconditionFailed", gen, err)
		}
	}
	if _, err := s.HoldCanary(ctx, 2, "api", true, 5, "alice", ""); err != nil {
		t.Errorf("pause in generation 2: %v", err)
	}
	select {
	case p := <-notes:
		if e, _ := db.ParseCanaryEvent(p); e.GenerationID != 2 {
			t.Errorf("unexpected notification %s", p)
		}
	case <-time.After(testrun.Timeout):
		t.Error("no notification of the pause in generation 2")
	}
	select {
	case p := <-notes:
		t.Errorf("unexpected notification %s", p)
	default:
	}
}

func TestListCanaryEvents(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	publish(t, s, 1)
	l := lockCanary(t, s)
	var ids []int64 // in the order recorded
	add := func(e apiv1.CanaryEvent, configured int) {
		t.Helper()
		ids = append(ids, record(t, l, e, configured).ID)
	}
	add(controllerAction(1, "api", apiv1.CanaryPromote, 5, 10), 5)  // ids[0]
	add(controllerAction(1, "web", apiv1.CanaryPromote, 0, 10), 0)  // ids[1]
	add(controllerAction(1, "api", apiv1.CanaryPromote, 10, 15), 5) // ids[2]
	publish(t, s, 2)
	add(controllerAction(2, "api", apiv1.CanaryRollback, 15, 10), 15) // ids[3]
	hold, err := s.HoldCanary(ctx, 2, "web", true, 10, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, hold.ID) // ids[4]

	list := func(service string, gen int64, limit int, before int64) []int64 {
		t.Helper()
		events, err := s.ListCanaryEvents(ctx, service, gen, limit, before)
		if err != nil {
			t.Fatalf("ListCanaryEvents(%q, %d, %d, %d): %v", service, gen, limit, before, err)
		}
		var got []int64
		for _, e := range events {
			got = append(got, e.ID)
		}
		return got
	}
	tests := []struct {
		name    string
		service string
		gen     int64
		limit   int
		before  int64
		want    []int64
	}{
		{"all", "", 0, 50, 0, []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}},
		{"first page", "", 0, 2, 0, []int64{ids[4], ids[3]}},
		{"second page", "", 0, 2, ids[3], []int64{ids[2], ids[1]}},
		{"last page", "", 0, 2, ids[1], []int64{ids[0]}},
		{"past the end", "", 0, 2, ids[0], nil},
		{"one service", "api", 0, 50, 0, []int64{ids[3], ids[2], ids[0]}},
		{"one generation", "", 1, 50, 0, []int64{ids[2], ids[1], ids[0]}},
		{"service and generation", "web", 2, 50, 0, []int64{ids[4]}},
		{"service and generation, paged", "api", 1, 1, ids[2], []int64{ids[0]}},
		{"unknown service", "nope", 0, 50, 0, nil},
		{"unknown generation", "", 9, 50, 0, nil},
		{"generation beyond int4", "", 3_000_000_000, 50, 0, nil},
	}
	for _, tt := range tests {
		if got := list(tt.service, tt.gen, tt.limit, tt.before); !slices.Equal(got, tt.want) {
			t.Errorf("%s: ids %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, err := s.ListCanaryEvents(ctx, "", 0, 0, 0); err == nil {
		t.Error("limit 0 was accepted")
	}
}

// A runner whose lease expired while its session stays open (frozen with
// SIGSTOP, or wedged) keeps the advisory lock; the next runner ends that
// session and takes over, and the old holder, once it wakes, finds its
// session gone before it could record anything. A lease being renewed is
// never taken over.
func TestCanaryLeaseTakeover(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	// Long enough that the holder's renewals, lease/2 apart, hold it on a
	// busy machine; the renewals below span more than one lease.
	const lease = 3 * time.Second
	frozen, err := s.TryCanaryLease(ctx, "frozen", lease)
	if err != nil || frozen == nil {
		t.Fatalf("TryCanaryLease = %v, %v; want the lock", frozen, err)
	}
	if l, err := s.TryCanaryLease(ctx, "other", lease); err != nil || l != nil {
		t.Fatalf("TryCanaryLease within the holder's lease = %v, %v; want nil, nil", l, err)
	}
	// A holder that renews keeps it past its first lease.
	for range 3 {
		time.Sleep(lease / 2)
		if err := frozen.Renew(ctx); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if l, err := s.TryCanaryLease(ctx, "other", lease); err != nil || l != nil {
			t.Fatalf("TryCanaryLease while the holder renews = %v, %v; want nil, nil", l, err)
		}
	}
	// Now the holder stops renewing.
	var took *db.CanaryLock
	testrun.Eventually(t, "the lock taken over once the lease expired", func() bool {
		l, err := s.TryCanaryLease(ctx, "other", lease)
		if err != nil {
			t.Fatalf("TryCanaryLease: %v", err)
		}
		if l != nil {
			took = l
		}
		return l != nil
	})
	defer took.Close(ctx)
	if took.TookOver == 0 {
		t.Errorf("TookOver = 0, want the ended session's pid")
	}
	if err := frozen.Renew(ctx); err == nil {
		t.Errorf("the old holder's Renew succeeded after the takeover; want an error")
	}
	if _, _, err := frozen.Newest(ctx); err == nil {
		t.Errorf("the old holder's session still answers after the takeover")
	}
	if err := took.Renew(ctx); err != nil {
		t.Errorf("the new holder's Renew: %v", err)
	}
}
