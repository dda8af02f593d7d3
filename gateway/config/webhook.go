package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// Webhook types of CanaryAnalysis.Webhooks: when each is called, and what
// its answer means.
const (
	// WebhookPreRollout must answer 2xx before the canary's first
	// promotion; until then the promotion waits.
	WebhookPreRollout = "pre_rollout"
	// WebhookRollout is called at every evaluation; a non-2xx answer (or
	// none) is a failed check, and MaxRolloutFailures in a row roll back.
	WebhookRollout = "rollout"
	// WebhookConfirmPromotion must answer 2xx before each promotion;
	// until then it waits.
	WebhookConfirmPromotion = "confirm_promotion"
	// WebhookPostRollout is called once the canary reaches the total or 0.
	WebhookPostRollout = "post_rollout"
	// WebhookEvent receives every canary event of the group, in order.
	WebhookEvent = "event"
)

// Limits of webhooks.
const (
	MaxWebhooks           = 8
	MaxWebhookTimeoutS    = 60
	DefaultWebhookTimeout = 5
	// MaxRolloutFailures is how many failed rollout checks in a row roll
	// the canary back.
	MaxRolloutFailures = 3
)

var webhookTypes = []string{WebhookPreRollout, WebhookRollout, WebhookConfirmPromotion, WebhookPostRollout, WebhookEvent}

// Webhook is one HTTP hook of a canary group: Dwara POSTs a JSON document
// to URL (http or https) and waits at most TimeoutS seconds (0 means
// DefaultWebhookTimeout) for the answer.
type Webhook struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	URL      string `json:"url"`
	TimeoutS int    `json:"timeout_s,omitempty"`
}

// Timeout returns the webhook's timeout in seconds, its default filled in.
func (h Webhook) Timeout() int {
	if h.TimeoutS <= 0 {
		return DefaultWebhookTimeout
	}
	return h.TimeoutS
}

// ParseWebhookURL checks a webhook URL: http or https, a host (a name, or
// an address that is neither unspecified nor link-local nor a metadata
// address: the address policy of endpoints, loopback allowed), no
// userinfo, no fragment; a path and a query are allowed.
func ParseWebhookURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("scheme must be http or https, got %s", quote(u.Scheme))
	case u.User != nil:
		return nil, fmt.Errorf("must not contain userinfo")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return nil, fmt.Errorf("must not have a fragment")
	case u.Hostname() == "":
		return nil, fmt.Errorf("host is empty")
	}
	if p := u.Port(); p != "" {
		if _, err := net.LookupPort("tcp", p); err != nil || !isDigits(p) {
			return nil, fmt.Errorf("port must be 1..65535, got %s", quote(p))
		}
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		if err := CheckAddress(a, false); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// webhooks checks the webhooks of a canary analysis at path.
func (v *validator) webhooks(hooks []Webhook, path string) {
	wp := member(path, "webhooks")
	if len(hooks) > MaxWebhooks {
		v.probs.add(wp, "at most %d webhooks, got %d", MaxWebhooks, len(hooks))
		return
	}
	seen := map[string]int{}
	for i, h := range hooks {
		hp := fmt.Sprintf("%s[%d]", wp, i)
		v.name(h.Name, hp, i, "webhook", wp, seen)
		if !slices.Contains(webhookTypes, h.Type) {
			v.probs.add(member(hp, "type"), "unknown webhook type %s; allowed: %s", quote(h.Type), strings.Join(webhookTypes, ", "))
		}
		if _, err := ParseWebhookURL(h.URL); err != nil {
			v.probs.add(member(hp, "url"), "%s: %v", quote(h.URL), err)
		}
		v.between(member(hp, "timeout_s"), h.TimeoutS, 0, MaxWebhookTimeoutS)
	}
}
