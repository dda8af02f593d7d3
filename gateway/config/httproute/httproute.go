// Package httproute maps Dwara's services to the Gateway API's HTTPRoutes
// (gateway.networking.k8s.io/v1) and back, with the upstream types
// (sigs.k8s.io/gateway-api): Export writes the services of a spec as
// HTTPRoutes, Import builds a spec from HTTPRoutes and the upstreams they
// name. What an HTTPRoute can say that Dwara cannot serve is refused by
// Import with the field named, never ignored; what Dwara can say that an
// HTTPRoute cannot (a canary analysis, a forced-branch header, stable
// allocation) travels in dwara.io annotations, so that an export imports
// back to the same spec.
//
// The mapping, per service:
//
//	metadata.name                  the service's name
//	spec.hostnames                 its host (one at most)
//	spec.rules[0].matches[0].path  PathPrefix, its base path
//	spec.rules[0].backendRefs      its upstream, or its split's targets with their weights
//	                               (name: the upstream; port: its first endpoint's)
//	spec.rules[0].filters          RequestMirror: its mirror (percent, or fraction of 10000)
//	spec.rules[0].sessionPersistence
//	                               Cookie: its sticky cookie (sessionName, absoluteTimeout)
//	dwara.io/canary-analysis       its split's canary_analysis, as JSON
//	dwara.io/allocation            its split's allocation, when not hash
//	dwara.io/override-header       its forced-branch header
//	dwara.io/mirror-max-body-bytes its mirror's max_body_bytes, when not the default
package httproute

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	yamlv3 "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/gateway/config"
)

// The annotations that carry what an HTTPRoute has no field for.
const (
	AnnotationCanaryAnalysis    = "dwara.io/canary-analysis"
	AnnotationAllocation        = "dwara.io/allocation"
	AnnotationOverrideHeader    = "dwara.io/override-header"
	AnnotationMirrorMaxBodySize = "dwara.io/mirror-max-body-bytes"
)

// annotations are the dwara.io annotations Import reads; any other
// dwara.io annotation is refused, as a typo would otherwise be ignored.
var annotations = []string{AnnotationCanaryAnalysis, AnnotationAllocation, AnnotationOverrideHeader, AnnotationMirrorMaxBodySize}

// ExportOptions are the optional parts of Export.
type ExportOptions struct {
	// Namespace, when not empty, is the routes' metadata.namespace.
	Namespace string
	// Gateway, when not empty, is the name of the Gateway the routes
	// attach to (spec.parentRefs).
	Gateway string
	// JSON writes the routes as one JSON List (kind: List, items) instead
	// of a stream of YAML documents; Import reads both.
	JSON bool
}

// Export returns the services of spec named in services (every service
// when services is empty) as HTTPRoutes, a stream of YAML documents, and
// the upstreams they name as a Dwara document ("upstreams: [...]") that
// Import takes back. A service Dwara serves in a way an HTTPRoute cannot
// express is an error naming it.
func Export(spec *config.Spec, services []string, o ExportOptions) (routes, upstreams []byte, err error) {
	var picked []config.Service
	for _, name := range services {
		svc, _ := spec.Service(name)
		if svc == nil {
			msg := fmt.Sprintf("no service %q", name)
			if near := spec.NearestService(name); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
			return nil, nil, errors.New(msg)
		}
		picked = append(picked, *svc)
	}
	if len(services) == 0 {
		picked = spec.Services
	}
	var out bytes.Buffer
	var used []string
	var items []map[string]any
	for i, svc := range picked {
		r, names, err := exportService(spec, svc, o)
		if err != nil {
			return nil, nil, err
		}
		for _, n := range names {
			if !slices.Contains(used, n) {
				used = append(used, n)
			}
		}
		m, err := routeMap(r)
		if err != nil {
			return nil, nil, err
		}
		if o.JSON {
			items = append(items, m)
			continue
		}
		doc, err := yaml.Marshal(m)
		if err != nil {
			return nil, nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(doc)
	}
	if o.JSON {
		js, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
		if err != nil {
			return nil, nil, err
		}
		out.Write(append(js, '\n'))
	}
	var ups struct {
		Upstreams []config.Upstream `json:"upstreams"`
	}
	for _, u := range spec.Upstreams {
		if slices.Contains(used, u.Name) {
			ups.Upstreams = append(ups.Upstreams, u)
		}
	}
	upstreams, err = yaml.Marshal(ups)
	if err != nil {
		return nil, nil, err
	}
	return out.Bytes(), upstreams, nil
}

// routeMap is r as a map, without what only a cluster fills in (its
// status, a null creation time).
func routeMap(r gatewayv1.HTTPRoute) (map[string]any, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok && md["creationTimestamp"] == nil {
		delete(md, "creationTimestamp")
	}
	return m, nil
}

// exportService returns the HTTPRoute of svc and the upstreams it names.
func exportService(spec *config.Spec, svc config.Service, o ExportOptions) (gatewayv1.HTTPRoute, []string, error) {
	r := gatewayv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: o.Namespace},
	}
	if o.Gateway != "" {
		r.Spec.ParentRefs = []gatewayv1.ParentReference{{Name: gatewayv1.ObjectName(o.Gateway)}}
	}
	if svc.Host != "" {
		r.Spec.Hostnames = []gatewayv1.Hostname{gatewayv1.Hostname(svc.Host)}
	}
	prefix := gatewayv1.PathMatchPathPrefix
	base := svc.BasePath
	if base == "" {
		base = "/"
	}
	rule := gatewayv1.HTTPRouteRule{
		Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: &base}}},
	}
	annotate := func(k, v string) {
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		r.Annotations[k] = v
	}
	var used []string
	backend := func(upstream string) (gatewayv1.BackendObjectReference, error) {
		used = append(used, upstream)
		ref := gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(upstream)}
		u, _ := spec.Upstream(upstream)
		if u == nil || len(u.Endpoints) == 0 {
			return ref, fmt.Errorf("service %q: upstream %q has no endpoints", svc.Name, upstream)
		}
		port, err := endpointPort(u.Endpoints[0])
		if err != nil {
			return ref, fmt.Errorf("service %q: upstream %q: %w", svc.Name, upstream, err)
		}
		p := gatewayv1.PortNumber(port)
		ref.Port = &p
		return ref, nil
	}
	if svc.Split != nil {
		for _, t := range svc.Split.Targets {
			ref, err := backend(t.Upstream)
			if err != nil {
				return r, nil, err
			}
			w := int32(t.Weight)
			rule.BackendRefs = append(rule.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: ref, Weight: &w}})
		}
		if ca := svc.Split.CanaryAnalysis; ca != nil {
			js, err := json.Marshal(ca)
			if err != nil {
				return r, nil, err
			}
			annotate(AnnotationCanaryAnalysis, string(js))
		}
		if a := svc.Split.Allocation; a != "" && a != config.AllocationHash {
			annotate(AnnotationAllocation, a)
		}
	} else {
		ref, err := backend(svc.Upstream)
		if err != nil {
			return r, nil, err
		}
		rule.BackendRefs = []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: ref}}}
	}
	if m := svc.Mirror; m != nil {
		ref, err := backend(m.Upstream)
		if err != nil {
			return r, nil, err
		}
		f := &gatewayv1.HTTPRequestMirrorFilter{BackendRef: ref}
		if c := int32(m.Percent * 100); float64(c) == m.Percent*100 && c%100 == 0 {
			p := c / 100
			f.Percent = &p
		} else {
			d := int32(10000)
			f.Fraction = &gatewayv1.Fraction{Numerator: int32(m.Percent*100 + 0.5), Denominator: &d}
		}
		rule.Filters = append(rule.Filters, gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestMirror, RequestMirror: f})
		if m.MaxBodyBytes != config.DefaultMirrorMaxBodyBytes {
			annotate(AnnotationMirrorMaxBodySize, strconv.Itoa(m.MaxBodyBytes))
		}
	}
	if st := svc.Sticky; st != nil {
		cookie := gatewayv1.CookieBasedSessionPersistence
		permanent := gatewayv1.PermanentCookieLifetimeType
		ttl := gatewayv1.Duration(strconv.Itoa(st.TTLSeconds) + "s")
		name := st.Cookie
		rule.SessionPersistence = &gatewayv1.SessionPersistence{SessionName: &name, Type: &cookie, AbsoluteTimeout: &ttl,
			CookieConfig: &gatewayv1.CookieConfig{LifetimeType: &permanent}}
	}
	if ov := svc.Override; ov != nil {
		annotate(AnnotationOverrideHeader, ov.Header)
	}
	r.Spec.Rules = []gatewayv1.HTTPRouteRule{rule}
	return r, used, nil
}

// endpointPort returns the port of an endpoint ("host:port", or a URL
// with one).
func endpointPort(ep string) (int, error) {
	hostport := ep
	if _, rest, ok := strings.Cut(ep, "://"); ok {
		hostport = rest
	}
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return 0, fmt.Errorf("endpoint %q has no port", ep)
	}
	return strconv.Atoi(port)
}

// Problem is one thing of an HTTPRoute that Import cannot honour: the
// route (its name, or its position when it has none), the field's path in
// it, and what is wrong.
type Problem struct {
	Route   string `json:"route"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p Problem) String() string { return p.Route + ": " + p.Path + ": " + p.Message }

// Error is Import's refusal: every problem found, in the order of the
// routes and their fields.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "1 field of the HTTPRoutes cannot be honoured: " + e.Problems[0].String()
	}
	return fmt.Sprintf("%d fields of the HTTPRoutes cannot be honoured", len(e.Problems))
}

// Import builds a spec from HTTPRoutes (YAML or JSON: a stream of
// documents, or a List of them) and upstreams, a Dwara document
// ("upstreams: [...]") that defines every Service name a backendRef or a
// mirror names (the names are the upstreams' names). The services come in
// the order of the routes. A field Dwara cannot honour is an *Error naming
// every one; the spec is then checked as any published spec is
// (config.Parse).
func Import(routes, upstreams []byte) (*config.Spec, error) {
	var ups struct {
		Upstreams []config.Upstream `json:"upstreams"`
	}
	if err := yaml.UnmarshalStrict(upstreams, &ups); err != nil {
		return nil, fmt.Errorf("upstreams: %w", err)
	}
	if len(ups.Upstreams) == 0 {
		return nil, errors.New("upstreams: none is defined; give the endpoints of every Service the routes name, as \"upstreams: [{name, endpoints}]\"")
	}
	docs, err := documents(routes)
	if err != nil {
		return nil, err
	}
	if len(docs) == 0 {
		return nil, errors.New("no HTTPRoute in the file")
	}
	im := importer{upstreams: ups.Upstreams}
	spec := config.Spec{Upstreams: ups.Upstreams}
	for i, doc := range docs {
		var r gatewayv1.HTTPRoute
		if err := yaml.UnmarshalStrict(doc, &r); err != nil {
			// Named, when its name can be read, and refused.
			id := fmt.Sprintf("#%d", i+1)
			var named struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if yaml.Unmarshal(doc, &named) == nil && named.Metadata.Name != "" {
				id = named.Metadata.Name
			}
			im.add(id, "", "%s", err.Error())
			continue
		}
		if svc, ok := im.route(i, &r); ok {
			spec.Services = append(spec.Services, svc)
		}
	}
	if len(im.probs) > 0 {
		return nil, &Error{Problems: im.probs}
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return config.Parse(js)
}

// documents splits data into its YAML (or JSON) documents, each back as
// bytes; a List's items are documents of their own.
func documents(data []byte) ([][]byte, error) {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	var out [][]byte
	for {
		var n yamlv3.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("routes: %w", err)
		}
		if len(n.Content) == 0 {
			continue // an empty document
		}
		var probe struct {
			Kind  string        `yaml:"kind"`
			Items []yamlv3.Node `yaml:"items"`
		}
		if err := n.Decode(&probe); err == nil && probe.Kind == "List" {
			for _, item := range probe.Items {
				b, err := yamlv3.Marshal(&item)
				if err != nil {
					return nil, err
				}
				out = append(out, b)
			}
			continue
		}
		b, err := yamlv3.Marshal(&n)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
}

// importer collects the problems of the routes.
type importer struct {
	upstreams []config.Upstream
	probs     []Problem
}

func (im *importer) add(route, path, format string, args ...any) {
	im.probs = append(im.probs, Problem{Route: route, Path: path, Message: fmt.Sprintf(format, args...)})
}

// route turns route i into a service, reporting what it cannot honour.
func (im *importer) route(i int, r *gatewayv1.HTTPRoute) (config.Service, bool) {
	name := r.Name
	id := name
	if id == "" {
		id = fmt.Sprintf("#%d", i+1)
	}
	n := len(im.probs)
	bad := func(path, format string, args ...any) { im.add(id, path, format, args...) }
	if r.APIVersion != gatewayv1.GroupVersion.String() && r.APIVersion != "gateway.networking.k8s.io/v1beta1" {
		bad("apiVersion", "%q is not gateway.networking.k8s.io/v1 (or v1beta1)", r.APIVersion)
	}
	if r.Kind != "HTTPRoute" {
		bad("kind", "%q is not HTTPRoute", r.Kind)
	}
	if name == "" {
		bad("metadata.name", "is required: it names the service")
	}
	svc := config.Service{Name: name}
	for _, k := range slices.Sorted(maps.Keys(r.Annotations)) {
		// Another tool's annotations are not Dwara's business; a dwara.io
		// one that is not Dwara's is a typo, not to be ignored.
		if strings.HasPrefix(k, "dwara.io/") && !slices.Contains(annotations, k) {
			bad("metadata.annotations."+k, "is not a Dwara annotation; they are %s", strings.Join(annotations, ", "))
		}
	}
	if r.Spec.UseDefaultGateways != "" {
		bad("spec.useDefaultGateways", "is not supported: Dwara is the gateway of every route it serves")
	}
	switch len(r.Spec.Hostnames) {
	case 0:
	case 1:
		h := string(r.Spec.Hostnames[0])
		if strings.HasPrefix(h, "*") {
			bad("spec.hostnames[0]", "a wildcard host (%q) is not supported: a Dwara service matches one host exactly", h)
		}
		svc.Host = h
	default:
		bad("spec.hostnames", "%d hostnames: a Dwara service has one host at most (one HTTPRoute per host)", len(r.Spec.Hostnames))
	}
	if len(r.Spec.Rules) != 1 {
		bad("spec.rules", "has %d rules: Dwara maps one rule per HTTPRoute (one service: a path prefix to weighted backends)", len(r.Spec.Rules))
		return svc, false
	}
	rule := r.Spec.Rules[0]
	const rp = "spec.rules[0]"
	svc.BasePath = "/"
	switch len(rule.Matches) {
	case 0:
	case 1:
		m := rule.Matches[0]
		mp := rp + ".matches[0]"
		if m.Path != nil {
			if m.Path.Type != nil && *m.Path.Type != gatewayv1.PathMatchPathPrefix {
				bad(mp+".path.type", "%s is not supported: a Dwara service matches a path prefix (PathPrefix)", *m.Path.Type)
			}
			if m.Path.Value != nil {
				svc.BasePath = *m.Path.Value
			}
		}
		if len(m.Headers) > 0 {
			bad(mp+".headers", "header matches are not supported yet (Dwara's match rules are not built)")
		}
		if len(m.QueryParams) > 0 {
			bad(mp+".queryParams", "query parameter matches are not supported")
		}
		if m.Method != nil {
			bad(mp+".method", "method matches are not supported")
		}
	default:
		bad(rp+".matches", "has %d matches: Dwara maps one path prefix per HTTPRoute", len(rule.Matches))
	}
	if rule.Timeouts != nil {
		bad(rp+".timeouts", "is not supported: an upstream's connect_timeout_ms and response_header_timeout_ms bound its requests")
	}
	if rule.Retry != nil {
		bad(rp+".retry", "is not supported: Dwara retries idempotent requests on another endpoint of the same upstream by itself")
	}
	im.backends(&svc, rule, bad)
	for j, f := range rule.Filters {
		fp := fmt.Sprintf("%s.filters[%d]", rp, j)
		if f.Type != gatewayv1.HTTPRouteFilterRequestMirror {
			bad(fp+".type", "%s is not supported: Dwara honours RequestMirror only", f.Type)
			continue
		}
		if svc.Mirror != nil {
			bad(fp, "a second RequestMirror: a Dwara service mirrors to one upstream")
			continue
		}
		svc.Mirror = im.mirror(f.RequestMirror, fp+".requestMirror", r.Annotations[AnnotationMirrorMaxBodySize], bad)
	}
	if v, ok := r.Annotations[AnnotationMirrorMaxBodySize]; ok && svc.Mirror == nil {
		bad("metadata.annotations."+AnnotationMirrorMaxBodySize, "%q without a RequestMirror filter", v)
	}
	if sp := rule.SessionPersistence; sp != nil {
		svc.Sticky = sticky(sp, rp+".sessionPersistence", bad)
	}
	if h, ok := r.Annotations[AnnotationOverrideHeader]; ok {
		svc.Override = &config.Override{Header: h}
	}
	if v, ok := r.Annotations[AnnotationAllocation]; ok {
		if svc.Split == nil {
			bad("metadata.annotations."+AnnotationAllocation, "%q on a route with one backend (no split)", v)
		} else {
			svc.Split.Allocation = v
		}
	}
	if v, ok := r.Annotations[AnnotationCanaryAnalysis]; ok {
		var ca config.CanaryAnalysis
		switch {
		case svc.Split == nil:
			bad("metadata.annotations."+AnnotationCanaryAnalysis, "on a route with one backend (no split)")
		case json.Unmarshal([]byte(v), &ca) != nil:
			bad("metadata.annotations."+AnnotationCanaryAnalysis, "is not the JSON of a canary_analysis block")
		default:
			svc.Split.CanaryAnalysis = &ca
		}
	}
	return svc, len(im.probs) == n
}

// backends sets svc's upstream or split from rule's backendRefs.
func (im *importer) backends(svc *config.Service, rule gatewayv1.HTTPRouteRule, bad func(string, string, ...any)) {
	const rp = "spec.rules[0]"
	if len(rule.BackendRefs) == 0 {
		bad(rp+".backendRefs", "is required: a Dwara service routes to at least one backend")
		return
	}
	var targets []config.Target
	for j, b := range rule.BackendRefs {
		bp := fmt.Sprintf("%s.backendRefs[%d]", rp, j)
		name := im.backendName(b.BackendObjectReference, bp, bad)
		if len(b.Filters) > 0 {
			bad(bp+".filters", "per-backend filters are not supported")
		}
		w := 1
		if b.Weight != nil {
			w = int(*b.Weight)
		}
		targets = append(targets, config.Target{Upstream: name, Weight: w})
	}
	if len(targets) == 1 && rule.BackendRefs[0].Weight == nil {
		svc.Upstream = targets[0].Upstream
		return
	}
	svc.Split = &config.Split{Targets: targets}
}

// backendName checks a backend reference and returns its upstream name.
func (im *importer) backendName(ref gatewayv1.BackendObjectReference, path string, bad func(string, string, ...any)) string {
	if ref.Group != nil && *ref.Group != "" {
		bad(path+".group", "%q: only core Services are supported", *ref.Group)
	}
	if ref.Kind != nil && *ref.Kind != "Service" {
		bad(path+".kind", "%q: only Services are supported", *ref.Kind)
	}
	if ref.Namespace != nil {
		bad(path+".namespace", "a backend in another namespace is not supported")
	}
	name := string(ref.Name)
	if !slices.ContainsFunc(im.upstreams, func(u config.Upstream) bool { return u.Name == name }) {
		names := make([]string, len(im.upstreams))
		for i, u := range im.upstreams {
			names[i] = u.Name
		}
		msg := fmt.Sprintf("Service %q is not among the upstreams given (%s)", name, strings.Join(names, ", "))
		if near := config.Nearest(name, names); near != "" {
			msg += fmt.Sprintf("; did you mean %q?", near)
		}
		bad(path+".name", "%s", msg)
	}
	return name
}

// mirror returns the Mirror of a RequestMirror filter.
func (im *importer) mirror(f *gatewayv1.HTTPRequestMirrorFilter, path, maxBody string, bad func(string, string, ...any)) *config.Mirror {
	if f == nil {
		bad(path, "is required with type RequestMirror")
		return nil
	}
	m := &config.Mirror{Upstream: im.backendName(f.BackendRef, path+".backendRef", bad), Percent: 100, MaxBodyBytes: config.DefaultMirrorMaxBodyBytes}
	switch {
	case f.Percent != nil && f.Fraction != nil:
		bad(path, "give percent or fraction, not both")
	case f.Percent != nil:
		m.Percent = float64(*f.Percent)
	case f.Fraction != nil:
		d := int32(100)
		if f.Fraction.Denominator != nil {
			d = *f.Fraction.Denominator
		}
		if d <= 0 {
			bad(path+".fraction.denominator", "must be positive")
			return m
		}
		m.Percent = float64(f.Fraction.Numerator) * 100 / float64(d)
	}
	if maxBody != "" {
		n, err := strconv.Atoi(maxBody)
		if err != nil {
			bad("metadata.annotations."+AnnotationMirrorMaxBodySize, "%q is not a number of bytes", maxBody)
		}
		m.MaxBodyBytes = n
	}
	return m
}

// sticky returns the Sticky of a session persistence block.
func sticky(sp *gatewayv1.SessionPersistence, path string, bad func(string, string, ...any)) *config.Sticky {
	st := &config.Sticky{Cookie: "dwara_affinity"}
	if sp.Type != nil && *sp.Type != gatewayv1.CookieBasedSessionPersistence {
		bad(path+".type", "%s is not supported: Dwara keeps sessions by a cookie (Cookie)", *sp.Type)
	}
	if sp.SessionName != nil {
		st.Cookie = *sp.SessionName
	}
	if sp.CookieConfig != nil && sp.CookieConfig.LifetimeType != nil && *sp.CookieConfig.LifetimeType != gatewayv1.PermanentCookieLifetimeType {
		bad(path+".cookieConfig.lifetimeType", "%s is not supported: a Dwara session cookie has a Max-Age (Permanent)", *sp.CookieConfig.LifetimeType)
	}
	if sp.AbsoluteTimeout != nil {
		d, err := time.ParseDuration(string(*sp.AbsoluteTimeout))
		switch {
		case err != nil:
			bad(path+".absoluteTimeout", "%q is not a duration", *sp.AbsoluteTimeout)
		case d%time.Second != 0:
			bad(path+".absoluteTimeout", "%q is not a whole number of seconds", *sp.AbsoluteTimeout)
		default:
			st.TTLSeconds = int(d / time.Second)
		}
	}
	return st
}
