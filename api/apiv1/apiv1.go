// Package apiv1 holds the wire types of Dwara's REST API, version 1: the
// JSON shapes of openapi/openapi.yaml, the header names and the rules a
// client and the server share (the request-id rule, the body cap).
//
// It is a leaf: it imports nothing of Dwara and nothing outside the standard
// library, so the client, the CLI and any program that talks to the API
// depend on it alone, never on the server, the database or the data plane.
// The server (package api) and the store (package db) convert to and from
// these types; JSON field names are part of the contract.
package apiv1

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Headers the API reads and writes.
const (
	// RequestIDHeader carries the request id in both directions; see
	// ValidRequestID.
	RequestIDHeader = "X-Request-Id"
	// ActorHeader names who makes a change; it becomes the generation's
	// author and the audit actor.
	ActorHeader = "X-Dwara-Actor"
)

// MaxBodyBytes caps every request body; a larger one is answered with 413.
const MaxBodyBytes = 1 << 20

// MaxMessageLen is the longest accepted change message, in characters.
const MaxMessageLen = 1024

// Generation actions (Generation.Action and AuditEntry.Action).
const (
	ActionCreate   = "create"
	ActionFlip     = "flip"
	ActionWeights  = "weights"
	ActionRollback = "rollback"
	ActionKill     = "kill"
	ActionAdopt    = "adopt"
)

// Audit outcomes (AuditEntry.Outcome).
const (
	// OutcomeAccepted: the call created a generation (or, for a call that
	// creates none, did what it was asked).
	OutcomeAccepted = "accepted"
	// OutcomeUnchanged: the call was valid but its result equals the
	// active spec, so nothing was stored.
	OutcomeUnchanged = "unchanged"
	// OutcomeRefused: the call was answered with an error.
	OutcomeRefused = "refused"
)

// Server-sent event names of GET /api/v1/events.
const (
	EventGenerationPublished = "generation_published"
	EventGenerationApplied   = "generation_applied"
	// EventCachePurged carries a CachePurged.
	EventCachePurged = "cache_purged"
)

// Generation is one stored configuration generation. Spec is the normalized
// spec JSON (defaults applied); it is omitted in lists and events.
// Unchanged is true only in the 200 answer of a change whose result equals
// the active spec: Generation is then the active one, and nothing was
// stored.
type Generation struct {
	ID        int64           `json:"id"`
	ParentID  *int64          `json:"parent_id"`
	Action    string          `json:"action"`
	SourceID  *int64          `json:"source_id"`
	Author    string          `json:"author"`
	Message   string          `json:"message"`
	CreatedAt time.Time       `json:"created_at"`
	Spec      json.RawMessage `json:"spec,omitempty"`
	Unchanged bool            `json:"unchanged,omitempty"`
}

// GenerationList is one page of generations, newest first, without specs.
type GenerationList struct {
	Items []Generation `json:"items"`
	// NextCursor, when not empty, is the cursor of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// AuditEntry is one row of the audit log: every mutating call, accepted,
// unchanged or refused. A burst of identical refusals (same remote
// address, actor, action, status, client request id and detail within
// seconds) is one entry whose Count says how many calls it stands for.
type AuditEntry struct {
	ID           int64     `json:"id"`
	At           time.Time `json:"at"` // when the (first) call was answered
	Actor        string    `json:"actor"`
	Action       string    `json:"action"`
	Outcome      string    `json:"outcome"` // one of the Outcome* constants
	Status       int       `json:"status"`  // HTTP status answered
	GenerationID *int64    `json:"generation_id"`
	// RequestID is the server's own id of the (first) call, the one in
	// the problem answered and in the server log; never the client's.
	RequestID string `json:"request_id"`
	// ClientRequestID is the X-Request-Id the client sent, kept only for
	// a call that got past authentication; "" otherwise.
	ClientRequestID string `json:"client_request_id"`
	RemoteAddr      string `json:"remote_addr"`
	// Detail is a JSON object of what the call asked and why it was
	// refused; null when there is nothing to say.
	Detail json.RawMessage `json:"detail"`
	// Count is how many calls the entry stands for: 1, or more for a burst
	// of identical refusals. 0 (in Go, before storing) means 1.
	Count int `json:"count"`
}

// AuditList is one page of the audit log, newest first.
type AuditList struct {
	Items []AuditEntry `json:"items"`
	// NextCursor, when not empty, is the cursor of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// GatewayInstance is one data-plane process as it last reported itself.
// AppliedGeneration 0 means none yet; a zero AppliedAt means never.
//
// Endpoints are the states of the endpoints the instance serves, as of its
// last report (it reports on every apply and every heartbeat, 5s by
// default). nil and empty both mean none reported, and both are encoded as
// an empty JSON array, never null.
type GatewayInstance struct {
	ID                string          `json:"id"`
	Hostname          string          `json:"hostname"`
	Listen            string          `json:"listen"`
	AppliedGeneration int64           `json:"applied_generation"`
	AppliedAt         time.Time       `json:"applied_at"`
	StartedAt         time.Time       `json:"started_at"`
	LastHeartbeat     time.Time       `json:"last_heartbeat"`
	Endpoints         []EndpointState `json:"endpoints"`
	// Stale is true when the instance's last heartbeat is older than
	// GatewayStaleAfter: it is presumed gone, its endpoint states and
	// applied generation no longer count. Set by the server; ignored in
	// a report.
	Stale bool `json:"stale"`
}

// GatewayStaleAfter is how old an instance's last heartbeat may be before
// it is stale: three heartbeats of the default interval (5 s).
const GatewayStaleAfter = 15 * time.Second

// MarshalJSON encodes g with nil Endpoints as an empty array.
func (g GatewayInstance) MarshalJSON() ([]byte, error) {
	type plain GatewayInstance // without this method
	if g.Endpoints == nil {
		g.Endpoints = []EndpointState{}
	}
	return json.Marshal(plain(g))
}

// EndpointState is the state of one endpoint of one upstream in a data
// plane: whether it may receive requests (Up: false when a health check or
// the passive checks marked it down) and how many requests it has in flight
// there. An endpoint named by several upstreams appears once per upstream,
// with the same state.
type EndpointState struct {
	Upstream string `json:"upstream"`
	Endpoint string `json:"endpoint"`
	Up       bool   `json:"up"`
	InFlight int64  `json:"in_flight"`
}

// GatewayList is every known data-plane instance.
type GatewayList struct {
	Items []GatewayInstance `json:"items"`
}

// CreateRequest is the body of POST /api/v1/generations, as JSON or YAML.
type CreateRequest struct {
	// Message says why; stored with the generation. Optional.
	Message string `json:"message,omitempty"`
	// Spec is the routing configuration (docs/spec.md, "The generation
	// spec").
	Spec json.RawMessage `json:"spec"`
}

// MessageRequest is the optional body of rollback, flip and kill.
type MessageRequest struct {
	// Message says why; empty means a generated one.
	Message string `json:"message,omitempty"`
}

// CachePurgeRequest is the body of POST
// /api/v1/services/{name}/cache/purge; empty or absent empties the whole
// cache of the service.
type CachePurgeRequest struct {
	// PathPrefix, when set, purges only the entries whose request path
	// starts with it: "/" and at most 1024 characters, no control
	// characters.
	PathPrefix string `json:"path_prefix,omitempty"`
	// Message says why; empty means a generated one.
	Message string `json:"message,omitempty"`
}

// CachePurge is the answer of a cache purge.
type CachePurge struct {
	Service    string `json:"service"`
	PathPrefix string `json:"path_prefix"`
	// Generation is the active generation, whose service was purged.
	Generation int64 `json:"generation"`
	// Removed is how many entries the purge removed in this process's
	// embedded proxy.
	Removed int `json:"removed"`
	// Notified is true once the purge was announced to every other
	// gateway: the replicas fed by the database (a NOTIFY) and those fed
	// by the control plane (a cache_purged event). A purge that could
	// not be announced is answered with an error instead.
	Notified bool `json:"notified"`
}

// CacheStats is the answer of GET /api/v1/services/{name}/cache: the
// figures of the service's response cache in the embedded proxy of the
// process that answers (each gateway reports its own on /metrics).
type CacheStats struct {
	Service string `json:"service"`
	// Generation is the active generation.
	Generation int64 `json:"generation"`
	// Entries and Bytes are what the cache holds now; MaxBytes its bound.
	Entries  int    `json:"entries"`
	Bytes    uint64 `json:"bytes"`
	MaxBytes int    `json:"max_bytes"`
	// Hits, Misses, Revalidated and Bypassed count the requests by result
	// since this process started caching the service.
	Hits        uint64 `json:"hits"`
	Misses      uint64 `json:"misses"`
	Revalidated uint64 `json:"revalidated"`
	Bypassed    uint64 `json:"bypassed"`
	// HitRatio is (hits + revalidated) over the requests that could be
	// cached (hits, misses, revalidated); null before the first.
	HitRatio *float64 `json:"hit_ratio"`
}

// CachePurged is the data of a cache_purged event: the purge of a
// service's cache (the whole cache, or the entries under PathPrefix) that
// every gateway fed by the control plane applies to its own.
type CachePurged struct {
	Service    string `json:"service"`
	PathPrefix string `json:"path_prefix,omitempty"`
	Generation int64  `json:"generation,omitempty"`
}

// WeightsRequest is the body of PUT /api/v1/services/{name}/weights.
type WeightsRequest struct {
	// Weights maps target upstream names to new weights; targets not named
	// keep theirs. Required, at least one entry.
	Weights map[string]int `json:"weights"`
	// AllowReshuffle accepts a change of the total weight, which reshuffles
	// keys across every target.
	AllowReshuffle bool `json:"allow_reshuffle,omitempty"`
	// Message says why; empty means a generated one.
	Message string `json:"message,omitempty"`
}

// DryRunResult answers POST /api/v1/generations?dry_run=true for a valid
// spec.
type DryRunResult struct {
	// Valid is always true (an invalid spec is a 422 problem).
	Valid bool `json:"valid"`
	// Impact compares the active generation with the proposed spec.
	Impact Diff `json:"impact"`
}

// Change kinds of a ServiceDiff or UpstreamDiff.
const (
	ChangeAdded     = "added"
	ChangeRemoved   = "removed"
	ChangeModified  = "modified"
	ChangeUnchanged = "unchanged"
	// ChangeReordered is a MatchChange only: the rule kept its conditions
	// and target but its place among the other rules changed.
	ChangeReordered = "reordered"
)

// Diff compares two specs: the old side From and the new side To.
type Diff struct {
	// From is the old generation; nil for the empty spec (no generation).
	From *int64 `json:"from"`
	// To is the new generation; nil for a proposed spec (a dry run).
	To *int64 `json:"to"`
	// Services lists every service of either side: the new side's in order,
	// then the removed ones.
	Services []ServiceDiff `json:"services"`
	// Upstreams lists every upstream of either side, in the same order.
	Upstreams []UpstreamDiff `json:"upstreams"`
	// CanaryReset names, in the new side's order, every canary group of
	// both sides whose targets, weights, canary_analysis or target
	// upstreams differ: publishing the new side over the old starts that
	// canary afresh (at its configured weight, its hold and any rollback
	// forgotten). A group of the other side only is not listed. Never
	// null.
	CanaryReset []string `json:"canary_reset"`
}

// ServiceDiff is what changed in one service.
type ServiceDiff struct {
	Name string `json:"name"`
	// Change is one of the Change* constants.
	Change string `json:"change"`
	// Details lists each change in words, e.g. "weights api-stable 95->90".
	Details []string `json:"details"`
	// MovedShare is the exact share of the service's request keys whose
	// upstream changes; 1 for an added or removed service. Where
	// MatchesDecide, it is the share of the requests the weights decide
	// (those no match rule takes): the weights tell nothing of the rest.
	MovedShare float64 `json:"moved_share"`
	// MatchesDecide is true when either side of the service has match
	// rules: the requests a rule matches go where the rule says, whatever
	// the weights ("matches decide"), so MovedShare does not count them;
	// where MatchChanges is not empty some of them may move, by a share
	// that depends on the traffic. False for an added or removed service.
	MatchesDecide bool `json:"matches_decide"`
	// MatchChanges lists the changes of the service's match rules: the new
	// side's rules in order, then the removed ones. Never null.
	MatchChanges []MatchChange `json:"match_changes"`
}

// MatchChange is one change of a split's match rules.
type MatchChange struct {
	// Rule is the rule's name.
	Rule string `json:"rule"`
	// Change is ChangeAdded, ChangeRemoved, ChangeModified (its conditions
	// or target) or ChangeReordered.
	Change string `json:"change"`
	// Details says what changed in words, e.g. "header X-User-Group = beta
	// -> api-canary", "target api-stable->api-canary", "position 2->1".
	Details []string `json:"details"`
}

// UpstreamDiff is what changed in one upstream.
type UpstreamDiff struct {
	Name string `json:"name"`
	// Change is one of the Change* constants.
	Change string `json:"change"`
	// Details lists each change in words, e.g. "endpoint added 10.0.0.3:80".
	Details []string `json:"details"`
}

// FieldError is one problem of a request, with the path of the field in the
// notation an operator writes ("services[0].split.targets[1].upstream");
// Path is empty for a problem of the document as a whole.
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// String formats e as "path: message", or just the message when Path is
// empty.
func (e FieldError) String() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// Problem is an RFC 9457 problem details object, the body of every error
// answer (Content-Type application/problem+json). A *Problem is also an
// error, so the server's helpers return one and the client hands one back
// for every error answer.
type Problem struct {
	// Type is a URI reference naming the problem type; "about:blank" means
	// the HTTP status says it all and Title is the status text.
	Type string `json:"type"`
	// Title is a short human-readable summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code of the answer.
	Status int `json:"status"`
	// Detail explains this occurrence; empty when Title says enough.
	Detail string `json:"detail,omitempty"`
	// Instance is the path of the request that failed.
	Instance string `json:"instance,omitempty"`
	// RequestID is the request id of the failed call, also found in the
	// server log and the audit log.
	RequestID string `json:"request_id,omitempty"`
	// Errors lists every validation problem (422, and 400 for bad
	// parameters), each with its field path.
	Errors []FieldError `json:"errors,omitempty"`
}

// Error implements error: "status title: detail; path: message...".
func (p *Problem) Error() string {
	s := fmt.Sprintf("%d %s", p.Status, p.Title)
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	for _, e := range p.Errors {
		s += "; " + e.String()
	}
	return s
}

// RequestIDLen is the length of a request id the server mints: 32 lowercase
// hexadecimal digits (128 random bits), the same from the API and the proxy.
const RequestIDLen = 32

// NewRequestID returns a fresh random request id of RequestIDLen lowercase
// hexadecimal digits, the form of every id the API mints.
func NewRequestID() string {
	var raw [RequestIDLen / 2]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand.Read)
	return hex.EncodeToString(raw[:])
}

// ValidRequestID reports whether v is a request id a client may choose:
// 1..128 characters of [A-Za-z0-9._:-]. The proxy and the API keep such an
// X-Request-Id and replace any other with a fresh one.
func ValidRequestID(v string) bool {
	if len(v) == 0 || len(v) > 128 {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// Canary event actions (CanaryEvent.Action). The controller writes
// promote, rollback and severe_rollback (weight changes), and the waits of
// a schedule: hold (a hold of hold_seconds starts at the weight in force),
// hold_reset (an evaluation that was not clean broke it) and gate (a step
// up waits for an operator's promote, which is recorded as a promote with
// its actor). An operator's pause and resume of a group are recorded as
// events too. A wait, a pause and a resume have equal from and to weights.
const (
	CanaryPromote        = "promote"
	CanaryRollback       = "rollback"
	CanarySevereRollback = "severe_rollback"
	CanaryPause          = "pause"
	CanaryResume         = "resume"
	CanaryHold           = "hold"
	CanaryHoldReset      = "hold_reset"
	CanaryGate           = "gate"
	// CanaryBreach: the rollback condition starts to hold and must go on
	// holding rollback.for_seconds before a rollback; CanaryBreachReset:
	// it stopped before.
	CanaryBreach      = "breach"
	CanaryBreachReset = "breach_reset"
	// CanaryWebhook: the result of one call of a webhook
	// (CanaryEvent.Webhook), recorded beside the events.
	CanaryWebhook = "webhook"
)

// CanaryWebhookResult is the result of one call of a canary webhook: its
// name, type and URL, the id of the event it was called for (0 for a
// rollout, pre_rollout or confirm_promotion check), the HTTP status (0
// when none came), whether it counts as a success (a 2xx), the error,
// the attempts made and the seconds the call took.
type CanaryWebhookResult struct {
	Name            string  `json:"name"`
	Type            string  `json:"type"`
	URL             string  `json:"url"`
	EventID         int64   `json:"event_id,omitempty"`
	Status          int     `json:"status"`
	OK              bool    `json:"ok"`
	Error           string  `json:"error,omitempty"`
	Attempts        int     `json:"attempts"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// CanaryWebhookCall is the JSON body of a call of a canary webhook: the
// hook's name and type, the group's service, the generation, the weights
// in force (baseline first) and, for an event hook (and a post_rollout
// hook, the event that ended the rollout), the event and a line of text
// a chat webhook can show.
type CanaryWebhookCall struct {
	Name         string       `json:"name"`
	Type         string       `json:"type"`
	Service      string       `json:"service"`
	GenerationID int64        `json:"generation_id"`
	Weights      [2]int       `json:"weights"`
	Event        *CanaryEvent `json:"event,omitempty"`
	Text         string       `json:"text,omitempty"`
}

// Canary group states (CanaryGroup.State).
const (
	// CanaryRunning: the controller judges the group every second.
	CanaryRunning = "running"
	// CanaryPaused: an operator holds the group; the controller does not act.
	CanaryPaused = "paused"
	// CanaryComplete: the canary holds the whole total; nothing more to do.
	CanaryComplete = "complete"
	// CanaryRolledBack: the canary is at weight 0, rolled back by the
	// controller or configured so; the controller does not act on it.
	CanaryRolledBack = "rolled_back"
	// CanaryDisabled: canary_analysis.enabled is false.
	CanaryDisabled = "disabled"
	// CanaryManaged: the split's managed_by names something else that
	// drives its weights; the controller stands down.
	CanaryManaged = "managed"
)

// Server-sent event names of the canary controller's actions.
const (
	EventCanaryPromoted   = "canary_promoted"
	EventCanaryRolledBack = "canary_rolled_back"
)

// CanaryFigures are what the controller judged of one version over its
// window: the request and error counts of the whole fleet, the error rate
// (errors / requests, 0 with no requests) and the p99 latency in seconds
// (0 with no requests).
type CanaryFigures struct {
	Requests   int64   `json:"requests"`
	Errors     int64   `json:"errors"`
	ErrorRate  float64 `json:"error_rate"`
	LatencyP99 float64 `json:"latency_p99"`
	// TTFTP99 is the p99 time to the first streamed token in seconds, of
	// a model group (kind model) only; 0 without a streamed answer.
	TTFTP99 float64 `json:"ttft_p99,omitempty"`
}

// Kinds of canary group (CanaryGroup.Kind).
const (
	// CanaryKindService is a service's split.
	CanaryKindService = "service"
	// CanaryKindModel is a model alias of a service, named
	// "<service>/<alias>".
	CanaryKindModel = "model"
)

// CanaryEvent is one transient weight change of the canary controller, or
// an operator's pause or resume. FromWeight and ToWeight are the canary
// target's weights; the baseline holds the rest of the total. PValue is
// the two-sided p-value of a two-proportion test of the canary's error
// rate against the baseline's over the judged window (1 when either side
// had no requests); Baseline, Canary and PValue are null for pause and
// resume.
type CanaryEvent struct {
	ID           int64          `json:"id"`
	GenerationID int64          `json:"generation_id"`
	Service      string         `json:"service"`
	FromWeight   int            `json:"from_weight"`
	ToWeight     int            `json:"to_weight"`
	Action       string         `json:"action"`
	Reason       string         `json:"reason"`
	Baseline     *CanaryFigures `json:"baseline"`
	Canary       *CanaryFigures `json:"canary"`
	PValue       *float64       `json:"p_value"`
	InstanceID   string         `json:"instance_id"`
	Actor        string         `json:"actor,omitempty"`
	// Rule names the canary_analysis rule that decided a controller
	// event (e.g. "rollback.relative", "promote.threshold",
	// "hold_seconds"); RuleFigures the figures it used (the thresholds,
	// the baseline's and the canary's values, the bound, the p-value and
	// min_confidence, the seconds held). Empty for an operator's events.
	Rule        string             `json:"rule,omitempty"`
	RuleFigures map[string]float64 `json:"rule_figures,omitempty"`
	// Webhook is the result of a webhook call (action webhook); nil for
	// every other event.
	Webhook   *CanaryWebhookResult `json:"webhook,omitempty"`
	CreatedAt time.Time            `json:"created_at"`
}

// CanaryEventList is one page of canary events, newest first.
type CanaryEventList struct {
	Items []CanaryEvent `json:"items"`
	// NextCursor, when not empty, is the cursor of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// CanaryGroup is the state of one canary group of the active generation: a
// service whose 2-target split has canary_analysis.
type CanaryGroup struct {
	// Service is the group's name: the service's for kind service,
	// "<service>/<alias>" for kind model.
	Service string `json:"service"`
	// Kind is CanaryKindService or CanaryKindModel.
	Kind         string `json:"kind"`
	GenerationID int64  `json:"generation_id"`
	Baseline     string `json:"baseline"` // upstream name
	Canary       string `json:"canary"`   // upstream name
	// Configured are the generation's weights, baseline first; Weights the
	// ones in force (equal to Configured until the controller acts, in
	// this generation or one it was carried over from).
	Configured [2]int `json:"configured"`
	Weights    [2]int `json:"weights"`
	Transient  bool   `json:"transient"`
	// State is one of the Canary* state constants.
	State string `json:"state"`
	// WindowSeconds is the judged window; BaselineWindow and CanaryWindow
	// are the fleet's figures over it as of the answer.
	WindowSeconds  int           `json:"window_seconds"`
	BaselineWindow CanaryFigures `json:"baseline_window"`
	CanaryWindow   CanaryFigures `json:"canary_window"`
	// PValue is the two-sided p-value of the two-proportion test of the
	// canary's error rate against the baseline's over the window (1 when
	// either side has no requests): what an analysis outside Dwara (an
	// Argo Rollouts AnalysisTemplate's web provider) can judge by.
	PValue float64 `json:"p_value"`
	// LastEvent is the group's newest event of this canary (this
	// generation, or the ones it was carried over from); nil when none.
	LastEvent *CanaryEvent `json:"last_event"`
	// HoldSince is when the hold running at the weight in force started
	// (canary_analysis.hold_seconds); nil when none runs.
	HoldSince *time.Time `json:"hold_since"`
	// GateWaiting is true while a step up waits for POST
	// /api/v1/services/{name}/canary/promote.
	GateWaiting bool `json:"gate_waiting"`
	// HoldSeconds is canary_analysis.hold_seconds (0: no hold);
	// HoldLeftSeconds how much of the running hold is left as of the
	// answer, by the API server's clock (0 once it has run: the next
	// clean evaluation steps up or waits at the gate); nil when no hold
	// runs.
	HoldSeconds     int      `json:"hold_seconds"`
	HoldLeftSeconds *float64 `json:"hold_left_seconds"`
	// Gate is canary_analysis.gate, defaulted: GateAuto, GateManual or
	// GateFinal (gateway/config).
	Gate string `json:"gate"`
	// NextWeight is the canary weight of the step up from the weight in
	// force (the next step of the schedule, else the weight plus step, at
	// most the total); NextGated is true when that step waits for an
	// operator's promote once its hold has run.
	NextWeight int  `json:"next_weight"`
	NextGated  bool `json:"next_gated"`
	// Schedule is canary_analysis.steps as weights, with the step in
	// force; nil when the group moves by step.
	Schedule *CanarySchedule `json:"schedule,omitempty"`
	// ManagedBy is the split's managed_by; empty when the controller
	// drives it.
	ManagedBy string `json:"managed_by,omitempty"`
}

// CanarySchedule is a canary group's schedule (canary_analysis.steps) as
// the controller follows it.
type CanarySchedule struct {
	// Steps are the canary's shares in percent of the total, as
	// configured; Weights the canary weights they are,
	// round(total x share / 100), one per step.
	Steps   []int `json:"steps"`
	Weights []int `json:"weights"`
	// Step is the index in Steps of the step in force: the last whose
	// weight is at most the canary weight in force; -1 below the first
	// (rolled back to 0, or configured under it). The weight in force is
	// Weights[Step] unless a generation configured the canary between
	// two steps.
	Step int `json:"step"`
}

// CanaryList is every canary group of the active generation.
type CanaryList struct {
	Items []CanaryGroup `json:"items"`
}

// Exposure reasons (Exposure.Reason).
const (
	// ExposureSticky: a sticky service minted a handle (a new session).
	ExposureSticky = "sticky"
	// ExposureRequest: a request-keyed pick, sampled.
	ExposureRequest = "request"
	// ExposureForced: the request named its branch in the override header.
	ExposureForced = "forced"
)

// Exposure is one recorded assignment of a key to a branch: a new sticky
// session, a sampled request-keyed pick, or a forced pick.
type Exposure struct {
	ID           int64     `json:"id"`
	At           time.Time `json:"at"`
	GenerationID int64     `json:"generation_id"`
	Service      string    `json:"service"`
	// Branch is the upstream of the picked target.
	Branch string `json:"branch"`
	// Share is the branch's weight over the total weight in force then.
	Share float64 `json:"share"`
	// KeyHash is the first 8 bytes of the SHA-256 of the key, in hex.
	KeyHash string `json:"key_hash"`
	// Reason is one of the Exposure* reason constants.
	Reason     string `json:"reason"`
	InstanceID string `json:"instance_id"`
}

// ExposureList is one page of exposures, newest first.
type ExposureList struct {
	Items []Exposure `json:"items"`
	// NextCursor, when not empty, is the cursor of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ExposureCount is how many exposures one generation and branch has.
type ExposureCount struct {
	GenerationID int64  `json:"generation_id"`
	Branch       string `json:"branch"`
	Count        int64  `json:"count"`
}

// ExposureSummary counts the stored exposures of a service: per generation
// and branch (generation descending, branch ascending), and per reason.
type ExposureSummary struct {
	Service string          `json:"service"`
	Total   int64           `json:"total"`
	Items   []ExposureCount `json:"items"`
	// Reasons counts by reason; every reason is present, 0 when none.
	Reasons map[string]int64 `json:"reasons"`
}

// MaxGatewayIDLen is the longest gateway instance id, in characters; an id
// is 1..MaxGatewayIDLen characters of [A-Za-z0-9._:-].
const MaxGatewayIDLen = 200

// MaxCanaryWindowRows is the most rows one CanaryWindowReport may carry.
const MaxCanaryWindowRows = 1000

// CanaryWindowRow is one replica's aggregate of one version ("baseline" or
// "canary") of one canary group over about a second. Latency is a sparse
// histogram of [bucket, count] pairs, buckets strictly ascending, each below
// the gateway's bucket count (gateway/canary.Buckets); Errors is at most
// Requests.
type CanaryWindowRow struct {
	GenerationID int64       `json:"generation_id"`
	Service      string      `json:"service"`
	Version      string      `json:"version"`
	Requests     uint64      `json:"requests"`
	Errors       uint64      `json:"errors"`
	Latency      [][2]uint64 `json:"latency"`
}

// CanaryWindowReport is the body of POST /api/v1/canary/windows: the
// canary window aggregates of the replica Instance (its gateway id), at
// most MaxCanaryWindowRows rows, no two of one generation, service and
// version.
type CanaryWindowReport struct {
	Instance string            `json:"instance"`
	Rows     []CanaryWindowRow `json:"rows"`
}
