package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
)

// PluginName is the name the plugin is registered under in Argo Rollouts'
// ConfigMap (trafficRouterPlugins) and the key of its configuration in a
// Rollout's spec.strategy.canary.trafficRouting.plugins.
const PluginName = "dwara/dwara"

// ManagedBy is the split.managed_by value the plugin drives: Dwara's own
// canary controller stands down for such a split.
const ManagedBy = "argo-rollouts"

// rulePrefix starts the names of the match rules the plugin adds, so that
// RemoveManagedRoutes removes those and only those.
const rulePrefix = "argo-"

// callTimeout bounds each call to Dwara's API.
const callTimeout = 20 * time.Second

// Config is the plugin's part of a Rollout:
//
//	trafficRouting:
//	  plugins:
//	    dwara/dwara:
//	      api: https://dwara-api.dwara.svc:9090
//	      tokenFile: /var/run/secrets/dwara/token   # a mounted Secret
//	      caFile: /var/run/secrets/dwara/ca.crt
//	      service: shop
//	      stableUpstream: shop-stable
//	      canaryUpstream: shop-canary
//	      mirrorUpstream: shop-shadow                # for setMirrorRoute
type Config struct {
	API            string `json:"api"`
	TokenFile      string `json:"tokenFile,omitempty"`
	CAFile         string `json:"caFile,omitempty"`
	Service        string `json:"service"`
	StableUpstream string `json:"stableUpstream"`
	CanaryUpstream string `json:"canaryUpstream"`
	MirrorUpstream string `json:"mirrorUpstream,omitempty"`
}

// Router is the traffic router: every call of Argo Rollouts becomes calls
// of Dwara's REST API on the service the Rollout names. It keeps no state
// of its own: Dwara's active generation is the state.
type Router struct {
	// HTTP is the client of Dwara's API when the configuration names no
	// CA; nil means a default one.
	HTTP *http.Client
}

// InitPlugin is called once when Argo Rollouts starts the plugin.
func (r *Router) InitPlugin() types.RpcError { return types.RpcError{} }

// Type is the plugin's name.
func (r *Router) Type() string { return PluginName }

// UpdateHash needs nothing: Dwara's upstreams are named in its spec, not
// by the pods' hashes.
func (r *Router) UpdateHash(*v1alpha1.Rollout, string, string, []v1alpha1.WeightDestination) types.RpcError {
	return types.RpcError{}
}

// SetWeight sets the canary's share of the service's split to desired
// percent, keeping the split's total weight (so no session is reshuffled
// but the ones that move to or from the canary).
func (r *Router) SetWeight(ro *v1alpha1.Rollout, desired int32, extra []v1alpha1.WeightDestination) types.RpcError {
	return rpcError(r.with(ro, func(ctx context.Context, c *api, cfg Config) error {
		if len(extra) > 0 {
			return errors.New("additional destinations are not supported: a Dwara split of the plugin has its stable and canary upstreams")
		}
		if desired < 0 || desired > 100 {
			return fmt.Errorf("weight %d is not a percentage", desired)
		}
		gen, spec, err := c.current(ctx)
		if err != nil {
			return err
		}
		total, _, err := checkSplit(spec, cfg)
		if err != nil {
			return err
		}
		canary := int(math.Round(float64(total) * float64(desired) / 100))
		body := map[string]any{
			"weights": map[string]int{cfg.StableUpstream: total - canary, cfg.CanaryUpstream: canary},
			"message": fmt.Sprintf("argo-rollouts %s/%s: canary at %d%%", ro.Namespace, ro.Name, desired),
		}
		return c.do(ctx, http.MethodPut, "/api/v1/services/"+cfg.Service+"/weights", &gen, body, nil)
	}))
}

// VerifyWeight reports the weight as verified once the active generation
// gives the canary that share and every live gateway has applied it.
func (r *Router) VerifyWeight(ro *v1alpha1.Rollout, desired int32, _ []v1alpha1.WeightDestination) (types.RpcVerified, types.RpcError) {
	verified := types.NotVerified
	err := r.with(ro, func(ctx context.Context, c *api, cfg Config) error {
		gen, spec, err := c.current(ctx)
		if err != nil {
			return err
		}
		total, weights, err := checkSplit(spec, cfg)
		if err != nil {
			return err
		}
		if want := int(math.Round(float64(total) * float64(desired) / 100)); weights[cfg.CanaryUpstream] != want {
			return nil // not the desired weight (yet)
		}
		var gws struct {
			Items []struct {
				ID                string `json:"id"`
				AppliedGeneration int64  `json:"applied_generation"`
			} `json:"items"`
		}
		if err := c.do(ctx, http.MethodGet, "/api/v1/gateways", nil, nil, &gws); err != nil {
			return err
		}
		if len(gws.Items) == 0 {
			return nil // no gateway reports: nothing is known to serve it
		}
		for _, g := range gws.Items {
			if g.AppliedGeneration < gen {
				return nil
			}
		}
		verified = types.Verified
		return nil
	})
	return verified, rpcError(err)
}

// SetHeaderRoute sends the requests that meet every header match of the
// route to the canary, whatever the weights, by a match rule named
// "argo-<name>" in the service's split, first in its list; a route with no
// match removes that rule.
func (r *Router) SetHeaderRoute(ro *v1alpha1.Rollout, hr *v1alpha1.SetHeaderRoute) types.RpcError {
	return rpcError(r.with(ro, func(ctx context.Context, c *api, cfg Config) error {
		if hr == nil || hr.Name == "" {
			return errors.New("a header route needs a name")
		}
		name := rulePrefix + hr.Name
		var rule map[string]any
		if len(hr.Match) > 0 {
			headers := map[string]any{}
			for _, m := range hr.Match {
				if m.HeaderValue == nil {
					return fmt.Errorf("header route %s: header %q has no value to match", hr.Name, m.HeaderName)
				}
				cond := map[string]string{}
				switch v := m.HeaderValue; {
				case v.Exact != "":
					cond["exact"] = v.Exact
				case v.Prefix != "":
					cond["prefix"] = v.Prefix
				case v.Regex != "":
					cond["regex"] = v.Regex
				default:
					return fmt.Errorf("header route %s: header %q: give exact, prefix or regex", hr.Name, m.HeaderName)
				}
				headers[m.HeaderName] = cond
			}
			rule = map[string]any{"name": name, "headers": headers, "target": cfg.CanaryUpstream}
		}
		return c.editSplit(ctx, cfg, fmt.Sprintf("argo-rollouts %s/%s: header route %s", ro.Namespace, ro.Name, hr.Name), func(svc, sp map[string]any) bool {
			rules := without(sp["match"], func(r map[string]any) bool { return r["name"] == name })
			if rule != nil {
				rules = append([]any{rule}, rules...)
			}
			return setList(sp, "match", rules)
		})
	}))
}

// SetMirrorRoute mirrors a share of the service's requests to the
// configuration's mirrorUpstream (an upstream that is not a target of the
// split: Dwara mirrors to a shadow). Dwara's mirror has no match
// conditions: a route with any is refused. A share of 0 removes it.
func (r *Router) SetMirrorRoute(ro *v1alpha1.Rollout, mr *v1alpha1.SetMirrorRoute) types.RpcError {
	return rpcError(r.with(ro, func(ctx context.Context, c *api, cfg Config) error {
		if mr == nil {
			return errors.New("no mirror route")
		}
		if len(mr.Match) > 0 {
			return fmt.Errorf("mirror route %s: match conditions are not supported: a Dwara mirror copies a share of all of the service's requests", mr.Name)
		}
		if cfg.MirrorUpstream == "" {
			return errors.New("set mirrorUpstream in the plugin's configuration: Dwara mirrors to an upstream that is not a target of the split")
		}
		pct := int32(100)
		if mr.Percentage != nil {
			pct = *mr.Percentage
		}
		return c.editSplit(ctx, cfg, fmt.Sprintf("argo-rollouts %s/%s: mirror route %s at %d%%", ro.Namespace, ro.Name, mr.Name, pct), func(svc, _ map[string]any) bool {
			if pct <= 0 {
				return removeMirror(svc, cfg)
			}
			svc["mirror"] = map[string]any{"upstream": cfg.MirrorUpstream, "percent": pct}
			return true
		})
	}))
}

// RemoveManagedRoutes removes the match rules and the mirror the plugin
// added.
func (r *Router) RemoveManagedRoutes(ro *v1alpha1.Rollout) types.RpcError {
	return rpcError(r.with(ro, func(ctx context.Context, c *api, cfg Config) error {
		return c.editSplit(ctx, cfg, fmt.Sprintf("argo-rollouts %s/%s: managed routes removed", ro.Namespace, ro.Name), func(svc, sp map[string]any) bool {
			rules := without(sp["match"], func(r map[string]any) bool {
				n, _ := r["name"].(string)
				return strings.HasPrefix(n, rulePrefix)
			})
			changed := setList(sp, "match", rules)
			return removeMirror(svc, cfg) || changed
		})
	}))
}

// with reads ro's configuration and runs f with an API client for it.
func (r *Router) with(ro *v1alpha1.Rollout, f func(context.Context, *api, Config) error) error {
	cfg, err := config(ro)
	if err != nil {
		return err
	}
	c, err := r.client(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return f(ctx, c, cfg)
}

// config reads and checks the plugin's configuration of ro.
func config(ro *v1alpha1.Rollout) (Config, error) {
	var cfg Config
	if ro == nil || ro.Spec.Strategy.Canary == nil || ro.Spec.Strategy.Canary.TrafficRouting == nil {
		return cfg, errors.New("the Rollout has no canary trafficRouting")
	}
	raw, ok := ro.Spec.Strategy.Canary.TrafficRouting.Plugins[PluginName]
	if !ok {
		return cfg, fmt.Errorf("the Rollout's trafficRouting.plugins has no %q", PluginName)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("plugin configuration: %w", err)
	}
	var missing []string
	for name, v := range map[string]string{"api": cfg.API, "service": cfg.Service, "stableUpstream": cfg.StableUpstream, "canaryUpstream": cfg.CanaryUpstream} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return cfg, fmt.Errorf("plugin configuration: %s required", strings.Join(missing, ", "))
	}
	if !strings.HasPrefix(cfg.API, "http://") && !strings.HasPrefix(cfg.API, "https://") {
		return cfg, fmt.Errorf("plugin configuration: api %q must be an http:// or https:// URL", cfg.API)
	}
	return cfg, nil
}

// client returns the API client of cfg.
func (r *Router) client(cfg Config) (*api, error) {
	c := &api{base: strings.TrimSuffix(cfg.API, "/"), http: r.HTTP}
	if c.http == nil {
		c.http = &http.Client{}
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("caFile %s: no PEM certificate", cfg.CAFile)
		}
		c.http = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	if cfg.TokenFile != "" {
		tok, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("tokenFile: %w", err)
		}
		c.token = strings.TrimSpace(string(tok))
	}
	return c, nil
}

// api calls Dwara's REST API.
type api struct {
	base, token string
	http        *http.Client
}

// do calls method path with body as JSON (nil for none), If-Match
// ifMatch when not nil, and decodes a 2xx answer into out (nil to drop
// it). Any other answer is an error with the API's problem.
func (c *api) do(ctx context.Context, method, path string, ifMatch *int64, body, out any) error {
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("X-Dwara-Actor", ManagedBy)
	if ifMatch != nil {
		req.Header.Set("If-Match", `"`+strconv.FormatInt(*ifMatch, 10)+`"`)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("dwara API: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("dwara API: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{status: resp.StatusCode, text: fmt.Sprintf("dwara API: %s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(data))}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

type apiError struct {
	status int
	text   string
}

func (e *apiError) Error() string { return e.text }

// current returns the active generation's id and spec (as plain JSON
// values, so that what the plugin does not touch goes back as it was).
func (c *api) current(ctx context.Context) (int64, map[string]any, error) {
	var g struct {
		ID   int64          `json:"id"`
		Spec map[string]any `json:"spec"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/v1/generations/current", nil, nil, &g); err != nil {
		return 0, nil, err
	}
	return g.ID, g.Spec, nil
}

// editSplit publishes the active generation with edit applied to the
// service and its split (edit reports whether it changed anything), on
// top of that generation only (If-Match), trying again when another
// change came first.
func (c *api) editSplit(ctx context.Context, cfg Config, message string, edit func(svc, sp map[string]any) bool) error {
	for try := 0; ; try++ {
		gen, spec, err := c.current(ctx)
		if err != nil {
			return err
		}
		if _, _, err := checkSplit(spec, cfg); err != nil {
			return err
		}
		svc := service(spec, cfg.Service)
		sp, _ := svc["split"].(map[string]any)
		if !edit(svc, sp) {
			return nil
		}
		// The slot table of a stable split is the server's to compute.
		delete(sp, "slots")
		err = c.do(ctx, http.MethodPost, "/api/v1/generations", &gen, map[string]any{"message": message, "spec": spec}, nil)
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusPreconditionFailed && try < 3 {
			continue
		}
		return err
	}
}

// service returns the service called name of spec, or nil.
func service(spec map[string]any, name string) map[string]any {
	svcs, _ := spec["services"].([]any)
	for _, s := range svcs {
		if m, ok := s.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	return nil
}

// checkSplit checks that cfg's service has a split of exactly its stable
// and canary upstreams that Dwara's controller leaves to the plugin, and
// returns its total and weights.
func checkSplit(spec map[string]any, cfg Config) (int, map[string]int, error) {
	svc := service(spec, cfg.Service)
	if svc == nil {
		return 0, nil, fmt.Errorf("the active generation has no service %q", cfg.Service)
	}
	sp, _ := svc["split"].(map[string]any)
	if sp == nil {
		return 0, nil, fmt.Errorf("service %q has no split", cfg.Service)
	}
	if sp["managed_by"] != ManagedBy {
		return 0, nil, fmt.Errorf("service %q's split is not managed_by: %s; set it, so Dwara's canary controller leaves the split to Argo Rollouts", cfg.Service, ManagedBy)
	}
	targets, _ := sp["targets"].([]any)
	weights := map[string]int{}
	total := 0
	for _, t := range targets {
		m, _ := t.(map[string]any)
		name, _ := m["upstream"].(string)
		w, _ := m["weight"].(float64)
		weights[name] = int(w)
		total += int(w)
	}
	_, okS := weights[cfg.StableUpstream]
	_, okC := weights[cfg.CanaryUpstream]
	if len(weights) != 2 || !okS || !okC {
		return 0, nil, fmt.Errorf("service %q's split must have exactly the targets %s and %s", cfg.Service, cfg.StableUpstream, cfg.CanaryUpstream)
	}
	return total, weights, nil
}

// without returns the match rules of list (a JSON array) for which drop
// is false.
func without(list any, drop func(map[string]any) bool) []any {
	rules, _ := list.([]any)
	var out []any
	for _, r := range rules {
		if m, ok := r.(map[string]any); ok && drop(m) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// setList sets m[key] to list (deleting it when empty) and reports
// whether that changed m.
func setList(m map[string]any, key string, list []any) bool {
	old, _ := m[key].([]any)
	was, _ := json.Marshal(old)
	now, _ := json.Marshal(list)
	if len(list) == 0 {
		delete(m, key)
	} else {
		m[key] = list
	}
	return !bytes.Equal(was, now)
}

// removeMirror removes the service's mirror when it is the plugin's.
func removeMirror(svc map[string]any, cfg Config) bool {
	m, _ := svc["mirror"].(map[string]any)
	if m == nil || cfg.MirrorUpstream == "" || m["upstream"] != cfg.MirrorUpstream {
		return false
	}
	delete(svc, "mirror")
	return true
}

// rpcError is err as Argo Rollouts' RPC error (empty for nil).
func rpcError(err error) types.RpcError {
	if err == nil {
		return types.RpcError{}
	}
	return types.RpcError{ErrorString: err.Error()}
}
