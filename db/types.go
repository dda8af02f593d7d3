package db

import (
	"encoding/json"
	"errors"
)

// Sentinel errors returned by the Store; callers test them with errors.Is.
var (
	// ErrNotFound: the generation (or other row) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPreconditionFailed: Publish was given IfMatch and the active
	// generation differs.
	ErrPreconditionFailed = errors.New("precondition failed: active generation differs")
)

// NotifyChannel is the PostgreSQL channel on which Publish announces a new
// generation id, in the same transaction as the insert.
const NotifyChannel = "dwara_generation"

// PublishParams is what Publish stores. Action is one of the apiv1.Action*
// constants ("" means create). IfMatch, when non-nil, makes Publish fail
// with ErrPreconditionFailed unless the active generation's id equals
// *IfMatch (0 meaning "no generation yet").
type PublishParams struct {
	Spec     json.RawMessage
	Action   string
	SourceID *int64
	Author   string
	Message  string
	IfMatch  *int64
}
