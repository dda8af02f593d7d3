package db

import (
	"encoding/json"
	"errors"
	"time"
)

// Sentinel errors returned by the Store; callers test them with errors.Is.
var (
	// ErrNotFound: the generation (or other row) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPreconditionFailed: Publish was given IfMatch and the active
	// generation differs.
	ErrPreconditionFailed = errors.New("precondition failed: active generation differs")
)

// Generation actions stored in generations.action.
const (
	ActionCreate   = "create"
	ActionFlip     = "flip"
	ActionWeights  = "weights"
	ActionRollback = "rollback"
	ActionKill     = "kill"
	ActionAdopt    = "adopt"
)

// NotifyChannel is the PostgreSQL channel on which Publish announces a new
// generation id, in the same transaction as the insert.
const NotifyChannel = "dwara_generation"

// Generation is one stored configuration generation. Spec is the normalized
// spec JSON (defaults applied); it is nil in list results.
type Generation struct {
	ID        int64           `json:"id"`
	ParentID  *int64          `json:"parent_id"`
	Action    string          `json:"action"`
	SourceID  *int64          `json:"source_id"`
	Author    string          `json:"author"`
	Message   string          `json:"message"`
	CreatedAt time.Time       `json:"created_at"`
	Spec      json.RawMessage `json:"spec,omitempty"`
}

// PublishParams is what Publish stores. IfMatch, when non-nil, makes Publish
// fail with ErrPreconditionFailed unless the active generation's id equals
// *IfMatch (0 meaning "no generation yet").
type PublishParams struct {
	Spec     json.RawMessage
	Action   string
	SourceID *int64
	Author   string
	Message  string
	IfMatch  *int64
}

// AuditEntry is one row of the audit log: every mutating call, accepted or
// refused.
type AuditEntry struct {
	ID           int64           `json:"id"`
	At           time.Time       `json:"at"`
	Actor        string          `json:"actor"`
	Action       string          `json:"action"`
	Outcome      string          `json:"outcome"` // "accepted" | "refused"
	Status       int             `json:"status"`  // HTTP status answered
	GenerationID *int64          `json:"generation_id"`
	RequestID    string          `json:"request_id"`
	RemoteAddr   string          `json:"remote_addr"`
	Detail       json.RawMessage `json:"detail"`
}

// GatewayInstance is one data-plane process as it last reported itself.
type GatewayInstance struct {
	ID                string    `json:"id"`
	Hostname          string    `json:"hostname"`
	Listen            string    `json:"listen"`
	AppliedGeneration int64     `json:"applied_generation"`
	AppliedAt         time.Time `json:"applied_at"`
	StartedAt         time.Time `json:"started_at"`
	LastHeartbeat     time.Time `json:"last_heartbeat"`
}
