package db

import (
	"encoding/json"
	"errors"

	"github.com/dwara/dwara/api/apiv1"
)

// Sentinel errors returned by the Store; callers test them with errors.Is.
var (
	// ErrNotFound: the generation (or other row) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPreconditionFailed: Publish was given IfMatch and the active
	// generation differs.
	ErrPreconditionFailed = errors.New("precondition failed: active generation differs")
	// ErrUnavailable: the database could not be reached or did not answer
	// in time (connection refused or reset, a connect or query timeout,
	// the caller's deadline, the server shutting down, starting up or out
	// of connections). The operation may succeed when retried later; see
	// IsUnavailable.
	ErrUnavailable = errors.New("database unavailable")
)

// NotifyChannel is the PostgreSQL channel on which Publish announces a new
// generation id, in the same transaction as the insert.
const NotifyChannel = "dwara_generation"

// PublishParams is what Publish stores. Action is one of the apiv1.Action*
// constants ("" means create). IfMatch, when non-nil, makes Publish fail
// with ErrPreconditionFailed unless the active generation's id equals
// *IfMatch (0 meaning "no generation yet").
//
// Message and Author are stored as text, which cannot hold a NUL character
// or invalid UTF-8: the caller refuses such input (Publish would fail).
//
// CanaryKeys names, by service, the key of each canary group of Spec
// (gateway/config.CanaryKeys): a group whose key equals the parent
// generation's keeps its canary's state (the weight in force, the hold,
// a rollback: canary_groups' origin); any other starts afresh. Nil means
// every group starts afresh.
type PublishParams struct {
	Spec       json.RawMessage
	Action     string
	SourceID   *int64
	Author     string
	Message    string
	IfMatch    *int64
	CanaryKeys map[string]string
}

// EditFunc computes what Edit publishes from the active generation, which
// carries its spec; the zero Generation (ID 0) when none has been
// published. It runs inside Edit's transaction while the publish lock is
// held, so every other publisher waits for it: it must be quick and must
// not use the Store. A non-nil error aborts the edit; Edit returns it
// wrapped, so errors.Is and errors.As see it.
type EditFunc func(active apiv1.Generation) (PublishParams, error)
