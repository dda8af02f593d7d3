package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// The audit spool: an audit entry that cannot be written because the
// database is away (db.IsUnavailable) is not lost. It is kept in memory,
// in order and with the time of its call, logged at WARN as one JSON line
// (so that even an entry the process never gets to write is on record),
// and written by Run once the database answers again, oldest first. While
// any entry waits, later ones queue behind it (the trail keeps its order),
// and a call answered 503 for want of the database queues its entry at
// once rather than spend more of its time bound on a second try. The spool
// holds DefaultAuditSpoolSize entries (Options.AuditSpoolSize); past that
// an entry is dropped, counted in dwara_audit_spool_dropped_total and
// logged at ERROR. dwara_audit_spool_entries is how many wait now.

// DefaultAuditSpoolSize is Options.AuditSpoolSize's default.
const DefaultAuditSpoolSize = 10_000

// auditRetryMin and auditRetryMax bound the wait between two tries of the
// oldest spooled entry while the database stays away.
const (
	auditRetryMin = 250 * time.Millisecond
	auditRetryMax = 5 * time.Second
)

// auditSpool is the queue of entries waiting for the database. Safe for
// concurrent use.
type auditSpool struct {
	mu      sync.Mutex
	q       []apiv1.AuditEntry // oldest first
	size    int
	kick    chan struct{} // capacity 1: an entry was added
	entries prometheus.Gauge
	dropped prometheus.Counter
	written prometheus.Counter
}

func newAuditSpool(size int, reg prometheus.Registerer) *auditSpool {
	if size <= 0 {
		size = DefaultAuditSpoolSize
	}
	sp := &auditSpool{
		size: size,
		kick: make(chan struct{}, 1),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dwara_audit_spool_entries",
			Help: "Audit entries kept in memory because the database was away, waiting to be written in order.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dwara_audit_spool_dropped_total",
			Help: "Audit entries lost because the spool was full while the database was away (each is also logged).",
		}),
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dwara_audit_spool_written_total",
			Help: "Spooled audit entries written once the database was back.",
		}),
	}
	if reg != nil {
		reg.MustRegister(sp.entries, sp.dropped, sp.written)
	}
	return sp
}

// busy reports whether any entry waits: a new one must queue behind it.
func (sp *auditSpool) busy() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.q) > 0
}

// add queues e and reports false, queuing nothing, when the spool is full.
func (sp *auditSpool) add(e apiv1.AuditEntry) bool {
	sp.mu.Lock()
	if len(sp.q) >= sp.size {
		sp.mu.Unlock()
		sp.dropped.Inc()
		return false
	}
	sp.q = append(sp.q, e)
	sp.entries.Set(float64(len(sp.q)))
	sp.mu.Unlock()
	select {
	case sp.kick <- struct{}{}:
	default:
	}
	return true
}

// head returns the oldest entry, if any.
func (sp *auditSpool) head() (apiv1.AuditEntry, bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.q) == 0 {
		return apiv1.AuditEntry{}, false
	}
	return sp.q[0], true
}

// pop removes the oldest entry.
func (sp *auditSpool) pop() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.q[0] = apiv1.AuditEntry{}
	sp.q = sp.q[1:]
	if len(sp.q) == 0 {
		sp.q = nil // let the backing array go
	}
	sp.entries.Set(float64(len(sp.q)))
}

// spoolAudit keeps e, the entry of a call at, for the database's return
// (see the comment above), and logs it. why is the write's error, or nil
// when it was not tried.
func (s *Server) spoolAudit(ctx context.Context, e apiv1.AuditEntry, at time.Time, why error) {
	e.At = at
	line, _ := json.Marshal(e)
	if !s.spool.add(e) {
		s.log.ErrorContext(ctx, "audit spool full: audit entry lost", "entry", json.RawMessage(line), "err", why)
		return
	}
	s.log.WarnContext(ctx, "database away: audit entry kept until it is back", "entry", json.RawMessage(line), "err", why)
}

// drainAudit writes the spooled entries, oldest first, until ctx is done:
// at once when one is added, then, while the database stays away, again
// after a wait that doubles from auditRetryMin to auditRetryMax. An entry
// the database refuses for another reason than being away (it would never
// be written) is logged at ERROR and dropped.
func (s *Server) drainAudit(ctx context.Context) {
	wait := time.Duration(0)
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		} else {
			select {
			case <-ctx.Done():
				return
			case <-s.spool.kick:
			}
		}
		for {
			e, ok := s.spool.head()
			if !ok {
				wait = 0
				break
			}
			wctx, cancel := context.WithTimeout(ctx, s.dbTimeout)
			_, err := s.store.RecordAudit(wctx, e)
			cancel()
			if err != nil && ctx.Err() != nil {
				return
			}
			if err != nil && db.IsUnavailable(err) {
				wait = min(max(2*wait, auditRetryMin), auditRetryMax)
				break
			}
			s.spool.pop()
			if err != nil {
				line, _ := json.Marshal(e)
				s.log.Log(ctx, slog.LevelError, "spooled audit entry refused by the database: lost", "entry", json.RawMessage(line), "err", err)
				s.spool.dropped.Inc()
				continue
			}
			s.spool.written.Inc()
			wait = 0
		}
	}
}
