package node

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/dwara/dwara/api"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/fleet"
	"github.com/dwara/dwara/gateway/source"
)

// consumer is one part of a process that the process's listener feeds.
type consumer struct {
	// channels are the notification channels it wants.
	channels []string
	// connected is called on every (re)connect, once every channel is
	// listened on; nil means nothing to do. It must not block.
	connected func()
	// notify is called with each notification on one of channels. It must
	// not block.
	notify func(channel, payload string)
}

// listener returns the process's one LISTEN connection: a db.Listener on the
// union of the consumers' channels that calls every consumer's connected on
// each (re)connect and hands each notification to the consumers that want
// its channel, in the order given. This is the only place where
// notifications are fanned out; no part of a process opens a LISTEN
// connection of its own.
func listener(connString string, log *slog.Logger, consumers ...consumer) *db.Listener {
	var channels []string
	for _, c := range consumers {
		for _, ch := range c.channels {
			if !slices.Contains(channels, ch) {
				channels = append(channels, ch)
			}
		}
	}
	return &db.Listener{
		ConnString: connString,
		Channels:   channels,
		OnConnect: func(context.Context) error {
			for _, c := range consumers {
				if c.connected != nil {
					c.connected()
				}
			}
			return nil
		},
		OnNotify: func(channel, payload string) {
			for _, c := range consumers {
				if slices.Contains(c.channels, channel) {
					c.notify(channel, payload)
				}
			}
		},
		Logger: log,
	}
}

// follows is the consumer of a database source: every generation
// notification and every (re)connect asks it to load the newest generation.
func follows(src *source.Database) consumer {
	return consumer{
		channels:  []string{db.NotifyChannel},
		connected: src.Notify,
		notify:    func(string, string) { src.Notify() },
	}
}

// weights is the consumer of a canary follower: every canary event and
// every (re)connect asks it to load the transient weights in force.
func weights(f *fleet.Follower) consumer {
	return consumer{
		channels:  []string{db.CanaryNotifyChannel},
		connected: f.Notify,
		notify:    func(string, string) { f.Notify() },
	}
}

// events is the consumer of the API's event loop: published generations and
// gateway reports become server-sent events.
func events(s *api.Server) consumer {
	return consumer{
		channels:  []string{db.NotifyChannel, db.GatewayNotifyChannel, db.CanaryNotifyChannel, db.CacheNotifyChannel},
		connected: s.Connected,
		notify:    s.Notify,
	}
}

// resetHook is a data plane's caches (a *proxy.Proxy, as purges and a
// source.ControlPlane purge them) with each emptying of them all reported
// to reset (Process.CachesReset) once it is done; nil reset reports
// nothing.
type resetHook struct {
	source.Caches
	reset func()
}

func (h resetHook) PurgeAllCaches() (removed int) {
	removed = h.Caches.PurgeAllCaches()
	if h.reset != nil {
		h.reset()
	}
	return removed
}

// purges is the consumer of a data plane's response caches: a purge on
// db.CacheNotifyChannel empties the service's cache (or its entries under
// the prefix), and every reconnect empties every cache, for the purges
// sent while the listener was away were missed. The first connect of the
// process empties them too (it may have served from its state directory
// meanwhile), logged only when it removed something.
func purges(px source.Caches, log *slog.Logger) consumer {
	var connects atomic.Int64
	return consumer{
		channels: []string{db.CacheNotifyChannel},
		connected: func() {
			first := connects.Add(1) == 1
			if n := px.PurgeAllCaches(); n > 0 || !first {
				log.Info("listener (re)connected; purged every response cache, for purges may have been missed meanwhile", "removed", n)
			}
		},
		notify: func(_, payload string) {
			p, err := db.ParseCachePurge(payload)
			if err != nil {
				log.Warn("cache purge notification ignored", "err", err)
				return
			}
			n, found := px.PurgeCache(p.Service, p.PathPrefix)
			log.Info("cache purged", "service", p.Service, "path_prefix", p.PathPrefix, "removed", n, "served", found)
		},
	}
}
