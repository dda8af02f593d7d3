package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
)

// Webhook call limits.
const (
	// webhookAttempts bounds the tries of one call: a transport failure,
	// a timeout or a 5xx is tried once more after webhookRetryDelay.
	webhookAttempts   = 2
	webhookRetryDelay = 200 * time.Millisecond
	// webhookRecheck is how long a failed pre_rollout or
	// confirm_promotion check waits before it is called again.
	webhookRecheck = 2 * time.Second
	// eventQueue bounds the events waiting for one event hook; an event
	// that finds it full is dropped and recorded as a failed delivery.
	eventQueue = 256
	// maxAnswer is how much of a hook's answer is read (and discarded).
	maxAnswer = 64 << 10
)

// hookResult is a finished call, handed back to the runner's loop.
type hookResult struct {
	generation int64
	service    string
	weight     int
	// key is the check the call answers (pre_rollout, confirm_promotion,
	// rollout): the runner's bookkeeping; "" for event and post_rollout.
	key string
	res apiv1.CanaryWebhookResult
}

// delivery is one call queued for an event (or post_rollout) hook.
type delivery struct {
	hook config.Webhook
	call apiv1.CanaryWebhookCall
	gen  int64
}

// hooks calls the webhooks of the canary groups for the runner, off its
// loop: every call runs in a goroutine of its own (checks) or of its hook
// (event deliveries, in order), with its timeout and bounded retries, and
// its result comes back on results, which the runner drains at each
// evaluation. Nothing a hook does (hang, refuse, answer slowly) blocks
// the runner. The maps are the runner's own: only its goroutine touches
// them. Close cancels every call and waits for the goroutines.
type hooks struct {
	ctx     context.Context
	cancel  context.CancelFunc
	client  *http.Client
	results chan hookResult
	wg      sync.WaitGroup

	inflight  map[string]bool
	confirmed map[string]bool
	retryAt   map[string]time.Time
	failures  map[string]int
	queues    map[string]chan delivery
	lastEvent int64
	gen       int64
}

// generation forgets the checks of generations before gen (their keys
// name their generation), so the bookkeeping stays as small as the
// newest generation's groups.
func (h *hooks) generation(gen int64) {
	if gen == h.gen {
		return
	}
	h.gen = gen
	clear(h.confirmed)
	clear(h.retryAt)
}

func newHooks(ctx context.Context) *hooks {
	ctx, cancel := context.WithCancel(ctx)
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: config.DialControl(false)}
	return &hooks{
		ctx:    ctx,
		cancel: cancel,
		client: &http.Client{
			Transport: &http.Transport{DialContext: dialer.DialContext, Proxy: nil, MaxIdleConnsPerHost: 2},
			// A hook's redirect is not followed: its target would escape
			// the address check of the URL.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		results:   make(chan hookResult, 256),
		inflight:  map[string]bool{},
		confirmed: map[string]bool{},
		retryAt:   map[string]time.Time{},
		failures:  map[string]int{},
		queues:    map[string]chan delivery{},
	}
}

// Close cancels every call in flight and waits for the goroutines.
func (h *hooks) Close() {
	h.cancel()
	h.wg.Wait()
	h.client.CloseIdleConnections()
}

// post calls hook with body: up to webhookAttempts tries, each within the
// hook's timeout; a 2xx is a success.
func (h *hooks) post(hook config.Webhook, body apiv1.CanaryWebhookCall, eventID int64) apiv1.CanaryWebhookResult {
	res := apiv1.CanaryWebhookResult{Name: hook.Name, Type: hook.Type, URL: hook.URL, EventID: eventID}
	js, err := json.Marshal(body)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	start := time.Now()
	defer func() { res.DurationSeconds = time.Since(start).Seconds() }()
	for res.Attempts < webhookAttempts {
		if res.Attempts > 0 {
			select {
			case <-h.ctx.Done():
				res.Error = "stopped: " + res.Error
				return res
			case <-time.After(webhookRetryDelay):
			}
		}
		res.Attempts++
		res.Status, err = h.attempt(hook, js)
		switch {
		case err != nil:
			res.Error = err.Error()
		case res.Status >= 200 && res.Status < 300:
			res.OK, res.Error = true, ""
			return res
		case res.Status < 500:
			res.Error = fmt.Sprintf("answered %d", res.Status)
			return res // the hook said no: not retried
		default:
			res.Error = fmt.Sprintf("answered %d", res.Status)
		}
		if h.ctx.Err() != nil {
			return res
		}
	}
	return res
}

// attempt is one POST of js to hook within its timeout.
func (h *hooks) attempt(hook config.Webhook, js []byte) (int, error) {
	ctx, cancel := context.WithTimeout(h.ctx, time.Duration(hook.Timeout())*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(js))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dwara-canary-webhook")
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return 0, fmt.Errorf("no answer within %d s (timeout_s)", hook.Timeout())
		}
		return 0, fmt.Errorf("call failed: %s", strings.TrimPrefix(err.Error(), "Post \""+hook.URL+"\": "))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// check starts a call of a check hook (pre_rollout, confirm_promotion,
// rollout) under key unless one is in flight or a failed one waits for
// its recheck; its result comes back on results with key.
func (h *hooks) check(now time.Time, key string, hook config.Webhook, call apiv1.CanaryWebhookCall, weight int) {
	if h.inflight[key] || now.Before(h.retryAt[key]) {
		return
	}
	h.inflight[key] = true
	h.wg.Go(func() {
		r := hookResult{generation: call.GenerationID, service: call.Service, weight: weight, key: key, res: h.post(hook, call, 0)}
		select {
		case h.results <- r:
		case <-h.ctx.Done():
		}
	})
}

// deliver queues an event (or post_rollout) call for hook, in order
// behind the calls queued before it; false when the queue is full.
func (h *hooks) deliver(hook config.Webhook, service string, d delivery) bool {
	qk := service + "\x00" + hook.Name + "\x00" + hook.URL
	q, ok := h.queues[qk]
	if !ok {
		q = make(chan delivery, eventQueue)
		h.queues[qk] = q
		h.wg.Go(func() {
			for {
				select {
				case <-h.ctx.Done():
					return
				case d := <-q:
					var id int64
					if d.call.Event != nil {
						id = d.call.Event.ID
					}
					r := hookResult{generation: d.gen, service: d.call.Service, weight: d.call.Weights[1], res: h.post(d.hook, d.call, id)}
					select {
					case h.results <- r:
					case <-h.ctx.Done():
						return
					}
				}
			}
		})
	}
	select {
	case q <- d:
		return true
	default:
		return false
	}
}

// checkKey names the check of hook for group g in generation gen at the
// canary weight from: a pre_rollout check holds for the generation, a
// confirm_promotion check for one step, a rollout check for the group.
func checkKey(g canary.Group, gen int64, hook config.Webhook, from int) string {
	switch hook.Type {
	case config.WebhookConfirmPromotion:
		return fmt.Sprintf("%s|%s|%s|%d|%d", hook.Type, g.Service, hook.Name, gen, from)
	case config.WebhookPreRollout:
		return fmt.Sprintf("%s|%s|%s|%d", hook.Type, g.Service, hook.Name, gen)
	}
	return fmt.Sprintf("%s|%s|%s", hook.Type, g.Service, hook.Name)
}

// eventText is the line of text an event hook gets with an event, for a
// chat webhook to show.
func eventText(e apiv1.CanaryEvent) string {
	t := fmt.Sprintf("[dwara] %s %s", e.Service, e.Action)
	if e.FromWeight != e.ToWeight {
		t += fmt.Sprintf(" %d -> %d", e.FromWeight, e.ToWeight)
	} else {
		t += fmt.Sprintf(" at %d", e.ToWeight)
	}
	t += fmt.Sprintf(" (generation %d)", e.GenerationID)
	if e.Reason != "" {
		t += ": " + e.Reason
	}
	if e.Actor != "" {
		t += " (by " + e.Actor + ")"
	}
	return t
}

// hooksOf returns g's webhooks of type typ.
func hooksOf(g canary.Group, typ string) []config.Webhook {
	var hs []config.Webhook
	for _, h := range g.Analysis.Webhooks {
		if h.Type == typ {
			hs = append(hs, h)
		}
	}
	return hs
}

// checkCall is the body of a check of hook on g in generation gen with
// the canary at weight.
func checkCall(hook config.Webhook, g canary.Group, gen int64, weight int) apiv1.CanaryWebhookCall {
	return apiv1.CanaryWebhookCall{Name: hook.Name, Type: hook.Type, Service: g.Service, GenerationID: gen, Weights: g.Weights(weight)}
}

// hookResults records every webhook result that came back since the last
// evaluation and keeps the checks' bookkeeping: a confirmed check, a
// failed one's recheck time, the rollout failures in a row. A rollout
// check is recorded only when it fails or is the first to pass after a
// failure, so a healthy hook called every second adds nothing.
func (r *Runner) hookResults(ctx context.Context, hk *hooks, log *slog.Logger) {
	for {
		var res hookResult
		select {
		case res = <-hk.results:
		default:
			return
		}
		record := true
		if res.key != "" {
			delete(hk.inflight, res.key)
			switch {
			case res.res.Type == config.WebhookRollout && res.res.OK:
				record = hk.failures[res.key] > 0
				hk.failures[res.key] = 0
			case res.res.Type == config.WebhookRollout:
				hk.failures[res.key]++
			case res.res.OK:
				hk.confirmed[res.key] = true
			default:
				hk.retryAt[res.key] = time.Now().Add(webhookRecheck)
			}
		}
		if !record {
			continue
		}
		reason := fmt.Sprintf("%s hook %s: answered %d", res.res.Type, res.res.Name, res.res.Status)
		if !res.res.OK {
			reason = fmt.Sprintf("%s hook %s failed after %d attempt(s): %s", res.res.Type, res.res.Name, res.res.Attempts, res.res.Error)
		}
		if _, err := r.Store.RecordCanaryWebhook(ctx, res.generation, res.service, res.weight, r.Instance, reason, res.res); err != nil {
			log.Warn("canary runner: webhook result not recorded", "service", res.service, "hook", res.res.Name, "err", err)
		}
	}
}

// rolloutChecks calls g's rollout hooks (one call in flight per hook)
// while the canary runs, and returns the rollback that
// config.MaxRolloutFailures failed checks in a row of one of them decide.
func (r *Runner) rolloutChecks(now time.Time, hk *hooks, gen int64, g canary.Group, s canary.State) (canary.Action, bool) {
	if s.Paused || s.CanaryWeight <= 0 || s.CanaryWeight >= g.Total {
		return canary.Action{}, false
	}
	for _, h := range hooksOf(g, config.WebhookRollout) {
		key := checkKey(g, gen, h, s.CanaryWeight)
		if n := hk.failures[key]; n >= config.MaxRolloutFailures {
			hk.failures[key] = 0
			return canary.Action{
				Service: g.Service, Kind: apiv1.CanaryRollback, From: s.CanaryWeight, To: g.Below(s.CanaryWeight),
				Reason: fmt.Sprintf("rollout hook %s failed %d checks in a row", h.Name, n),
				Rule:   "webhook.rollout", RuleFigures: map[string]float64{"failures": float64(n)},
				PValue: 1,
			}, true
		}
		hk.check(now, key, h, checkCall(h, g, gen, s.CanaryWeight), s.CanaryWeight)
	}
	return canary.Action{}, false
}

// promotionWaits reports whether a promotion of g must wait for its
// pre_rollout hooks (before the first promotion: no transient weight
// yet) or confirm_promotion hooks (before each) to answer 2xx, starting
// the calls that are missing.
func (r *Runner) promotionWaits(now time.Time, hk *hooks, gen int64, g canary.Group, s canary.State, transient bool, log *slog.Logger) bool {
	hs := hooksOf(g, config.WebhookConfirmPromotion)
	if !transient {
		hs = append(hooksOf(g, config.WebhookPreRollout), hs...)
	}
	waits := false
	for _, h := range hs {
		key := checkKey(g, gen, h, s.CanaryWeight)
		if hk.confirmed[key] {
			continue
		}
		waits = true
		hk.check(now, key, h, checkCall(h, g, gen, s.CanaryWeight), s.CanaryWeight)
	}
	if waits {
		log.Debug("canary runner: promotion waits for webhooks", "service", g.Service, "weight", s.CanaryWeight)
	}
	return waits
}

// deliverEvents queues every event recorded since the last delivery to
// the event hooks of its group, in order, and each event that takes a
// canary to the total or to 0 to its post_rollout hooks. A queue that is
// full drops the event, recorded as a failed delivery.
func (r *Runner) deliverEvents(ctx context.Context, hk *hooks, gen int64, groups []canary.Group, log *slog.Logger) {
	byService := make(map[string]canary.Group, len(groups))
	for _, g := range groups {
		if len(g.Analysis.Webhooks) > 0 {
			byService[g.Service] = g
		}
	}
	if len(byService) == 0 {
		return
	}
	events, err := r.Store.CanaryEventsAfter(ctx, hk.lastEvent, 500)
	if err != nil {
		log.Warn("canary runner: events for the webhooks not read", "err", err)
		return
	}
	for _, e := range events {
		hk.lastEvent = e.ID
		g, ok := byService[e.Service]
		if !ok {
			continue
		}
		hs := hooksOf(g, config.WebhookEvent)
		if e.FromWeight != e.ToWeight && (e.ToWeight == 0 || e.ToWeight >= g.Total) {
			hs = append(hs, hooksOf(g, config.WebhookPostRollout)...)
		}
		for _, h := range hs {
			ev := e
			call := apiv1.CanaryWebhookCall{Name: h.Name, Type: h.Type, Service: g.Service, GenerationID: e.GenerationID,
				Weights: g.Weights(e.ToWeight), Event: &ev, Text: eventText(e)}
			if hk.deliver(h, g.Service, delivery{hook: h, call: call, gen: gen}) {
				continue
			}
			res := apiv1.CanaryWebhookResult{Name: h.Name, Type: h.Type, URL: h.URL, EventID: e.ID,
				Error: fmt.Sprintf("dropped: %d events already wait for this hook", eventQueue)}
			if _, err := r.Store.RecordCanaryWebhook(ctx, gen, g.Service, e.ToWeight, r.Instance, h.Type+" hook "+h.Name+" "+res.Error, res); err != nil {
				log.Warn("canary runner: webhook result not recorded", "service", g.Service, "hook", h.Name, "err", err)
			}
		}
	}
}
