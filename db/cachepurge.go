package db

import (
	"context"
	"encoding/json"
	"fmt"
)

// CacheNotifyChannel is the PostgreSQL channel on which NotifyCachePurge
// announces a purge of a service's response cache, so that every process
// fed by the database (serve and its replicas) empties its own. The API's
// event loop turns it into the cache_purged event of GET /api/v1/events
// for the gateways fed by the control plane.
const CacheNotifyChannel = "dwara_cache_purge"

// CachePurge is the payload of a notification on CacheNotifyChannel.
type CachePurge struct {
	Service string `json:"service"`
	// PathPrefix, when not "", limits the purge to the entries whose
	// request path starts with it.
	PathPrefix string `json:"path_prefix,omitempty"`
	// Generation is the active generation when the purge was asked for.
	Generation int64 `json:"generation,omitempty"`
}

// NotifyCachePurge announces p on CacheNotifyChannel. It stores nothing:
// a process not listening at the time misses it (its listener purges every
// cache when it reconnects).
func (s *Store) NotifyCachePurge(ctx context.Context, p CachePurge) error {
	payload, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, CacheNotifyChannel, string(payload)); err != nil {
		return fmt.Errorf("notify cache purge: %w", translate(err))
	}
	return nil
}

// ParseCachePurge decodes a notification on CacheNotifyChannel.
func ParseCachePurge(payload string) (CachePurge, error) {
	var p CachePurge
	if err := json.Unmarshal([]byte(payload), &p); err != nil {
		return CachePurge{}, fmt.Errorf("decode cache purge %q: %w", payload, err)
	}
	if p.Service == "" {
		return CachePurge{}, fmt.Errorf("cache purge %q names no service", payload)
	}
	return p, nil
}
