// Package client is a small typed Go client of Dwara's REST API (the admin
// listener of `dwara serve`, documented by openapi/openapi.yaml). It speaks
// the API's wire types (package api/apiv1) and nothing of the server:
// generations come back as apiv1.Generation, pages as apiv1.GenerationList,
// diffs and dry runs as apiv1.Diff and apiv1.DryRunResult, and every error
// answer as an *apiv1.Problem carrying the status, title, detail and each
// field error. A change whose result equals the active spec comes back as
// the active generation with Unchanged set.
//
// The `dwara` command's client verbs (package client/cli) are built on it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dwara/dwara/api/apiv1"
)

// DefaultURL is the admin listener of `dwara serve` with its default flags.
const DefaultURL = "http://127.0.0.1:9090"

// DefaultTimeout bounds each call when Options.HTTPClient is nil.
const DefaultTimeout = 30 * time.Second

// maxAnswerBytes caps how much of an answer is read. The largest answers are
// a generation with its spec (specs are capped at 1 MiB on the way in) and a
// page of 500 generations without specs.
const maxAnswerBytes = 16 << 20

// Options configures a Client; every zero value is documented on its field.
type Options struct {
	// URL is the base URL of the admin listener, e.g.
	// "http://127.0.0.1:9090". A URL without a scheme gets "http://". ""
	// means DefaultURL.
	URL string
	// Token is sent as "Authorization: Bearer <token>" on every call; ""
	// sends no Authorization header (a server without DWARA_ADMIN_TOKEN).
	Token string
	// Actor is sent as X-Dwara-Actor and becomes the author of the
	// generations this client creates; "" sends none (the server records
	// "anonymous").
	Actor string
	// HTTPClient makes the calls; nil means a client with DefaultTimeout.
	HTTPClient *http.Client
	// Answer, when non-nil, is called with the status and body of every
	// answer read from the server, success or problem, before the body is
	// decoded. It runs on the goroutine making the call. `dwara --json` uses
	// it to print the answer as the server wrote it.
	Answer func(status int, body []byte)
}

// Client calls one Dwara API. Create it with New. It is safe for concurrent
// use when Options.Answer is (or is nil), and may be copied.
type Client struct {
	base   *url.URL
	token  string
	actor  string
	http   *http.Client
	answer func(status int, body []byte)
}

// New returns a Client for o. It fails only when o.URL is not an http(s)
// URL.
func New(o Options) (*Client, error) {
	base, err := ParseURL(o.URL)
	if err != nil {
		return nil, err
	}
	c := &Client{base: base, token: o.Token, actor: o.Actor, http: o.HTTPClient, answer: o.Answer}
	if c.http == nil {
		c.http = &http.Client{Timeout: DefaultTimeout}
	}
	return c, nil
}

// ParseURL parses the base URL of an admin listener the way New does: ""
// means DefaultURL, a missing scheme means http, and a trailing slash is
// dropped.
func ParseURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		raw = DefaultURL
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse API URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("parse API URL %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("parse API URL %q: no host", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// URL returns the base URL the client calls.
func (c *Client) URL() string {
	return c.base.String()
}

// HasToken reports whether the client sends a bearer token.
func (c *Client) HasToken() bool { return c.token != "" }

// CreateOptions are the optional parts of Create.
type CreateOptions struct {
	// DryRun validates the spec and reports its impact on the active
	// generation without storing anything.
	DryRun bool
	// IfMatch, when non-nil, makes the publish conditional: it fails with
	// a 412 Problem unless the active generation is *IfMatch (0: there is no
	// generation yet). nil means unconditional.
	IfMatch *int64
}

// CreateResult is the answer of Create: Generation for a publish, DryRun for
// a dry run; exactly one is non-nil.
type CreateResult struct {
	Generation *apiv1.Generation
	DryRun     *apiv1.DryRunResult
}

// EditOptions are the optional parts of the calls that publish a new
// generation derived from a stored one (Flip, SetWeights, Kill, Rollback,
// Adopt).
type EditOptions struct {
	// Message says why; "" means the server's generated message (e.g.
	// "flip api").
	Message string
	// IfMatch, when non-nil, fails the call with a 412 Problem unless the
	// active generation is *IfMatch. nil means the server edits whatever
	// generation is active.
	IfMatch *int64
}

// Create publishes spec (a JSON document) as a new generation with message
// (POST /api/v1/generations), or with o.DryRun only validates it and
// reports its impact. An invalid spec is a 422 *apiv1.Problem listing every
// error.
func (c *Client) Create(ctx context.Context, message string, spec json.RawMessage, o CreateOptions) (CreateResult, error) {
	if !json.Valid(spec) {
		return CreateResult{}, errors.New("create generation: the spec is not valid JSON")
	}
	path := "/api/v1/generations"
	if o.DryRun {
		path += "?dry_run=true"
	}
	body := apiv1.CreateRequest{Message: message, Spec: spec}
	if o.DryRun {
		var r apiv1.DryRunResult
		if err := c.do(ctx, http.MethodPost, path, body, o.IfMatch, &r); err != nil {
			return CreateResult{}, err
		}
		return CreateResult{DryRun: &r}, nil
	}
	var g apiv1.Generation
	if err := c.do(ctx, http.MethodPost, path, body, o.IfMatch, &g); err != nil {
		return CreateResult{}, err
	}
	return CreateResult{Generation: &g}, nil
}

// Flip swaps the weights of service's 2-target split as a new generation
// (POST /api/v1/services/{name}/flip); a 409 Problem when the service has no
// 2-target split.
func (c *Client) Flip(ctx context.Context, service string, o EditOptions) (apiv1.Generation, error) {
	return c.edit(ctx, http.MethodPost, "/api/v1/services/"+url.PathEscape(service)+"/flip", apiv1.MessageRequest{Message: o.Message}, o.IfMatch)
}

// SetWeights sets the weights of the named targets of service's split as a
// new generation (PUT /api/v1/services/{name}/weights); targets not named
// keep theirs. A change of the total weight is a 422 Problem unless
// allowReshuffle is true.
func (c *Client) SetWeights(ctx context.Context, service string, weights map[string]int, allowReshuffle bool, o EditOptions) (apiv1.Generation, error) {
	body := apiv1.WeightsRequest{Weights: weights, AllowReshuffle: allowReshuffle, Message: o.Message}
	return c.edit(ctx, http.MethodPut, "/api/v1/services/"+url.PathEscape(service)+"/weights", body, o.IfMatch)
}

// Kill sets every target of service's split but the first (the baseline) to
// 0, the baseline taking the total, as a new generation (POST
// /api/v1/services/{name}/kill).
func (c *Client) Kill(ctx context.Context, service string, o EditOptions) (apiv1.Generation, error) {
	return c.edit(ctx, http.MethodPost, "/api/v1/services/"+url.PathEscape(service)+"/kill", apiv1.MessageRequest{Message: o.Message}, o.IfMatch)
}

// Rollback publishes a new generation with exactly the spec of generation id
// (POST /api/v1/generations/{id}/rollback).
func (c *Client) Rollback(ctx context.Context, id int64, o EditOptions) (apiv1.Generation, error) {
	return c.edit(ctx, http.MethodPost, "/api/v1/generations/"+strconv.FormatInt(id, 10)+"/rollback", apiv1.MessageRequest{Message: o.Message}, o.IfMatch)
}

// Adopt publishes the canary weights the controller set for service in
// the active generation as its configured weights, in a new generation
// with action adopt (POST /api/v1/services/{name}/canary/adopt). A 409
// Problem when the service has no canary analysis or the controller has
// not changed its weights in the active generation.
func (c *Client) Adopt(ctx context.Context, service string, o EditOptions) (apiv1.Generation, error) {
	return c.edit(ctx, http.MethodPost, canaryPath(service, "adopt"), apiv1.MessageRequest{Message: o.Message}, o.IfMatch)
}

// PauseCanary holds the canary controller off service's canary group, at
// the weights in force, until it is resumed (POST
// /api/v1/services/{name}/canary/pause); message says why ("" means the
// server's "pause canary of SERVICE"). It returns the group as it is
// afterwards; pausing a paused group changes nothing and returns it the
// same way. A 409 Problem when the service has no canary analysis.
func (c *Client) PauseCanary(ctx context.Context, service, message string) (apiv1.CanaryGroup, error) {
	return c.hold(ctx, service, "pause", message)
}

// ResumeCanary lets the canary controller act on service's canary group
// again (POST /api/v1/services/{name}/canary/resume); message says why. It
// returns the group as it is afterwards; resuming a group that is not
// paused changes nothing and returns it the same way.
func (c *Client) ResumeCanary(ctx context.Context, service, message string) (apiv1.CanaryGroup, error) {
	return c.hold(ctx, service, "resume", message)
}

// PromoteCanary passes the gate service's canary waits at (POST
// /api/v1/services/{name}/canary/promote): the canary takes the step up,
// recorded with message (optional) and the caller as actor. It returns the
// group as it is afterwards; a 409 Problem when no gate waits.
func (c *Client) PromoteCanary(ctx context.Context, service, message string) (apiv1.CanaryGroup, error) {
	return c.hold(ctx, service, "promote", message)
}

func (c *Client) hold(ctx context.Context, service, verb, message string) (apiv1.CanaryGroup, error) {
	var g apiv1.CanaryGroup
	err := c.do(ctx, http.MethodPost, canaryPath(service, verb), apiv1.MessageRequest{Message: message}, nil, &g)
	return g, err
}

// PurgeCache empties the response cache of service, or only its entries
// whose request path starts with pathPrefix when that is not "" (POST
// /api/v1/services/{name}/cache/purge), in the processes the server
// reaches; message says why. A 409 Problem when the service has no cache.
func (c *Client) PurgeCache(ctx context.Context, service, pathPrefix, message string) (apiv1.CachePurge, error) {
	var out apiv1.CachePurge
	err := c.do(ctx, http.MethodPost, "/api/v1/services/"+url.PathEscape(service)+"/cache/purge",
		apiv1.CachePurgeRequest{PathPrefix: pathPrefix, Message: message}, nil, &out)
	return out, err
}

// canaryPath is the path of a canary call on service.
func canaryPath(service, verb string) string {
	return "/api/v1/services/" + url.PathEscape(service) + "/canary/" + verb
}

func (c *Client) edit(ctx context.Context, method, path string, body any, ifMatch *int64) (apiv1.Generation, error) {
	var g apiv1.Generation
	err := c.do(ctx, method, path, body, ifMatch, &g)
	return g, err
}

// List returns one page of generations, newest first, without specs (GET
// /api/v1/generations). limit 0 means the server's default (50); cursor ""
// means the first page, else the NextCursor of the previous page.
func (c *Client) List(ctx context.Context, limit int, cursor string) (apiv1.GenerationList, error) {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/api/v1/generations"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var page apiv1.GenerationList
	err := c.do(ctx, http.MethodGet, path, nil, nil, &page)
	return page, err
}

// Get returns generation id with its spec (GET /api/v1/generations/{id}); a
// 404 Problem when it does not exist.
func (c *Client) Get(ctx context.Context, id int64) (apiv1.Generation, error) {
	var g apiv1.Generation
	err := c.do(ctx, http.MethodGet, "/api/v1/generations/"+strconv.FormatInt(id, 10), nil, nil, &g)
	return g, err
}

// Current returns the active generation with its spec (GET
// /api/v1/generations/current); a 404 Problem before the first publish.
func (c *Client) Current(ctx context.Context) (apiv1.Generation, error) {
	var g apiv1.Generation
	err := c.do(ctx, http.MethodGet, "/api/v1/generations/current", nil, nil, &g)
	return g, err
}

// Diff compares generation id with generation against (GET
// /api/v1/generations/{id}/diff): per service, what changed and the share of
// keys that moves. against 0 means id's parent.
func (c *Client) Diff(ctx context.Context, id, against int64) (apiv1.Diff, error) {
	path := "/api/v1/generations/" + strconv.FormatInt(id, 10) + "/diff"
	if against != 0 {
		path += "?against=" + strconv.FormatInt(against, 10)
	}
	var d apiv1.Diff
	err := c.do(ctx, http.MethodGet, path, nil, nil, &d)
	return d, err
}

// Canary returns every canary group of the active generation, with its
// weights, state and the fleet's figures over its window (GET
// /api/v1/canary); an empty list when there is no generation yet.
func (c *Client) Canary(ctx context.Context) (apiv1.CanaryList, error) {
	var list apiv1.CanaryList
	err := c.do(ctx, http.MethodGet, "/api/v1/canary", nil, nil, &list)
	return list, err
}

// CanaryEvents returns one page of canary events, newest first (GET
// /api/v1/canary/events): only service's when service is not "", only
// generation's when generation is not 0. limit 0 means the server's default
// (50); cursor "" means the first page, else the NextCursor of the
// previous page.
func (c *Client) CanaryEvents(ctx context.Context, service string, generation int64, limit int, cursor string) (apiv1.CanaryEventList, error) {
	q := url.Values{}
	if service != "" {
		q.Set("service", service)
	}
	if generation != 0 {
		q.Set("generation", strconv.FormatInt(generation, 10))
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/api/v1/canary/events"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var page apiv1.CanaryEventList
	err := c.do(ctx, http.MethodGet, path, nil, nil, &page)
	return page, err
}

// do sends one call: body (nil for none) as JSON, ifMatch (nil for none) as
// If-Match, and decodes a 2xx answer into out. A non-2xx answer is an
// *apiv1.Problem; a transport failure is wrapped with the method and URL.
func (c *Client) do(ctx context.Context, method, path string, body any, ifMatch *int64, out any) error {
	target := c.base.String() + path
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode request: %w", method, target, err)
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, target, err)
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", "dwara-client")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.actor != "" {
		req.Header.Set(apiv1.ActorHeader, c.actor)
	}
	if ifMatch != nil {
		req.Header.Set("If-Match", `"`+strconv.FormatInt(*ifMatch, 10)+`"`)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, target, err)
	}
	if c.answer != nil {
		c.answer(resp.StatusCode, data)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return problemOf(resp, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, target, err)
	}
	return nil
}

// problemOf turns an error answer into an *apiv1.Problem: the problem+json
// body when there is one, else a Problem made from the status and the start
// of the body (an answer from something other than Dwara, such as a proxy in
// front of it).
func problemOf(resp *http.Response, data []byte) *apiv1.Problem {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		var p apiv1.Problem
		if err := json.Unmarshal(data, &p); err == nil && (p.Title != "" || p.Detail != "" || p.Status != 0) {
			if p.Status == 0 {
				p.Status = resp.StatusCode
			}
			if p.Title == "" {
				p.Title = http.StatusText(resp.StatusCode)
			}
			return &p
		}
	}
	p := &apiv1.Problem{
		Type:      "about:blank",
		Title:     http.StatusText(resp.StatusCode),
		Status:    resp.StatusCode,
		RequestID: resp.Header.Get(apiv1.RequestIDHeader),
	}
	if p.Title == "" {
		p.Title = resp.Status
	}
	if text := strings.Join(strings.Fields(string(data)), " "); text != "" {
		if r := []rune(text); len(r) > 200 {
			text = string(r[:200]) + "..."
		}
		p.Detail = "the answer is not a Dwara problem document: " + text
	}
	return p
}
