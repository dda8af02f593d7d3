package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// ListenerApplicationName is the application_name a Listener's connection
// reports to PostgreSQL, so operators (and tests) can find its backend in
// pg_stat_activity.
const ListenerApplicationName = "dwara-listener"

// Timing of a Listener. The backoff between connection attempts doubles
// from minBackoff up to maxBackoff, with jitter; an idle connection is
// pinged every idlePing so a dead one is noticed.
const (
	minBackoff     = 100 * time.Millisecond
	maxBackoff     = 5 * time.Second
	idlePing       = 15 * time.Second
	pingTimeout    = 5 * time.Second
	connectTimeout = 10 * time.Second
)

// ProbeChannel is the channel of a Listener's own probe notifications.
const ProbeChannel = "dwara_probe"

// MsgDeaf is the message a Listener logs (at ERROR) when its probe
// notification did not come back.
const MsgDeaf = "listener: a notification this process sent itself did not come back"

// Listener LISTENs on Channels over one dedicated connection (not a pooled
// one) and reconnects, with exponential backoff and jitter, whenever that
// connection fails. A process runs one, whose OnConnect and OnNotify fan out
// to every part that needs notifications.
//
// On every (re)connect it first LISTENs on each channel and only then calls
// OnConnect, so something published between the two is never lost: it is
// either seen by OnConnect or notified afterwards. Set the fields before Run;
// a Listener must not be copied or changed once Run has started, and runs
// at most once at a time.
type Listener struct {
	// ConnString is the database to listen on (a postgres:// URL or a
	// key=value string). Required.
	ConnString string
	// Channels are the notification channels to LISTEN on. Required.
	Channels []string
	// OnConnect, when non-nil, is called after every successful (re)connect
	// once every channel is listened on. An error drops the connection and
	// the Listener reconnects after a backoff.
	OnConnect func(ctx context.Context) error
	// OnNotify is called for each notification, in order, from the
	// Listener's goroutine. It must not block: hand the work to another
	// goroutine. Required.
	OnNotify func(channel, payload string)
	// Logger receives connection losses and retries; nil means
	// slog.Default().
	Logger *slog.Logger

	// probeChannel is where the idle probe is sent; "" means
	// ProbeChannel. Tests send it where nothing listens.
	probeChannel string
	// idle is the quiet time before a probe; 0 means idlePing.
	idle time.Duration
	// deaf is true from a probe that did not come back until one does.
	deaf atomic.Bool
}

// Deaf reports whether the last probe notification the Listener sent
// itself did not come back although its connection worked: the path to
// PostgreSQL drops notifications (a pooler in transaction mode, say), so
// no publish would reach this process. It is false again once a probe
// comes back. A database that is merely unreachable does not make it
// deaf. Safe for concurrent use.
func (l *Listener) Deaf() bool { return l.deaf.Load() }

// Run connects, listens and delivers notifications until ctx is done, then
// returns nil. While the database is unreachable it keeps retrying. It
// returns an error at once only when the Listener is misconfigured (bad
// ConnString, no Channels, nil OnNotify).
func (l *Listener) Run(ctx context.Context) error {
	cfg, err := l.config()
	if err != nil {
		return err
	}
	log := l.Logger
	if log == nil {
		log = slog.Default()
	}

	if l.probeChannel == "" {
		l.probeChannel = ProbeChannel
	}
	if l.idle == 0 {
		l.idle = idlePing
	}
	backoff := minBackoff
	for {
		connected, err := l.session(ctx, cfg)
		if ctx.Err() != nil {
			return nil
		}
		msg := "listener connect failed"
		if connected {
			msg = "listener connection lost"
			backoff = minBackoff
		}
		wait := jitter(backoff)
		log.Warn(msg, "channels", l.Channels, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// config validates the Listener and builds the connection config.
func (l *Listener) config() (*pgx.ConnConfig, error) {
	if len(l.Channels) == 0 {
		return nil, errors.New("listener: no channels")
	}
	if l.OnNotify == nil {
		return nil, errors.New("listener: nil OnNotify")
	}
	cfg, err := pgx.ParseConfig(l.ConnString)
	if err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	cfg.RuntimeParams["application_name"] = ListenerApplicationName
	return cfg, nil
}

// session runs one connection from connect to failure. connected reports
// whether it got as far as listening and OnConnect, so the caller resets its
// backoff.
func (l *Listener) session(ctx context.Context, cfg *pgx.ConnConfig) (connected bool, err error) {
	dialCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	conn, err := pgx.ConnectConfig(dialCtx, cfg)
	cancel()
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()

	for _, ch := range append(l.Channels[:len(l.Channels):len(l.Channels)], ProbeChannel) {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return false, fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	if l.OnConnect != nil {
		if err := l.OnConnect(ctx); err != nil {
			return false, fmt.Errorf("on connect: %w", err)
		}
	}

	// While idle, the connection sends itself a probe notification that
	// must come back within pingTimeout: that proves the connection works
	// and that notifications reach it.
	probe := ""
	var probeDeadline time.Time
	for {
		wait := l.idle
		if probe != "" {
			wait = time.Until(probeDeadline)
		}
		waitCtx, cancel := context.WithTimeout(ctx, wait)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil && n != nil && n.Channel == ProbeChannel:
			if n.Payload == probe {
				probe = ""
				if l.deaf.Swap(false) {
					l.logger().Info("listener hears notifications again")
				}
			}
		case err == nil:
			if n != nil {
				l.OnNotify(n.Channel, n.Payload)
			}
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && probe != "":
			// The connection answers but the probe did not come back.
			if !l.deaf.Swap(true) {
				l.logger().Error(MsgDeaf, "channel", l.probeChannel,
					"hint", "publishes will not reach this process; is the listener's connection going through a pooler "+
						"in transaction mode? Set DWARA_LISTEN_DATABASE_URL to a direct (session) connection")
			}
			return true, errors.New("probe notification lost")
		case errors.Is(err, context.DeadlineExceeded):
			probe = strconv.FormatUint(rand.Uint64(), 36)
			probeDeadline = time.Now().Add(pingTimeout)
			pingCtx, cancel := context.WithTimeout(ctx, pingTimeout)
			_, err := conn.Exec(pingCtx, "SELECT pg_notify($1, $2)", l.probeChannel, probe)
			cancel()
			if err != nil {
				return true, fmt.Errorf("probe: %w", err)
			}
		default:
			return true, fmt.Errorf("wait for notification: %w", err)
		}
	}
}

func (l *Listener) logger() *slog.Logger {
	if l.Logger == nil {
		return slog.Default()
	}
	return l.Logger
}

// jitter returns d randomised to [d/2, d).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2)
}
