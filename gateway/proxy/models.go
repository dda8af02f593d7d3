package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/modelreq"
	"github.com/dwara/dwara/gateway/split"
)

// Model aliases (config.ModelAlias): routing OpenAI-compatible requests by
// the "model" of their body.
//
// A POST to /chat/completions, /completions, /embeddings or /responses
// under the base path of a service with models has its body read by Route
// (through the front's Request.Body, under the stall timeout), bounded by
// the service's max_body_bytes (413 beyond it, without reading a body
// whose Content-Length says so), and scanned for its top-level "model"
// and "user" (gateway/modelreq: one pass, no decode; 400 for a body that
// is not one JSON object). A model that names an alias is picked over the
// alias's targets by the split's FNV-1a walk, keyed by the alias's
// affinity (the body's user, a header, the sticky cookie; else the request
// id), skipping a target with no endpoint up as the split's pick does; the
// body is rewritten with the target's model (every other byte kept) and
// sent with its new Content-Length to the target's upstream, by its
// balancer, with its retries. Such a request does not fail over to
// another target once sent (it would reach another model with this one's
// name). Any other model, or none, goes on to the service's upstream or
// split with the body as read. A body the client sent chunked is sent on
// with a Content-Length (its trailers are dropped).
//
// Requests to other paths, or other methods, are routed as before: no
// body read, no allocation.
//
// The answer of an alias request is watched as it streams (answerTap, on
// the connection, so on every front): the time from the send to the first
// "data:" event with content is dwara_model_ttft_seconds, and the "usage"
// of the answer (a JSON answer's, or an event stream's final usage chunk)
// found in its last tapTail bytes adds to dwara_model_tokens_total.

// statusContentTooLarge is RFC 9110's 413.
const statusContentTooLarge = 413

// statusTooManyRequests is RFC 6585's 429: a provider's rate limit, not a
// canary error of a model group.
const statusTooManyRequests = 429

// modelPaths are the paths under a service's base path whose POSTs are
// routed by model.
var modelPaths = [...]string{"/chat/completions", "/completions", "/embeddings", "/responses"}

// modelRoutes are a service's compiled model aliases.
type modelRoutes struct {
	maxBody int64
	aliases []*modelAlias
}

type affinityKind uint8

const (
	affinityNone affinityKind = iota
	affinityUser
	affinityHeader
	affinityCookie
)

// modelAlias is a compiled config.ModelAlias.
type modelAlias struct {
	name string
	// sp is the alias's weighted split: the generation's, until the
	// canary controller swaps in transient weights (SetCanaryWeight).
	sp      atomic.Pointer[split.Split]
	targets []*Target
	// group is the alias's canary group name, "<service>/<alias>", and
	// canary its compiled group; nil without canary_analysis.
	group    string
	canary   *canaryGroup
	affinity affinityKind
	// header is the affinity header, lowercase (Request.Header).
	header string
}

// modelTarget is what a Target of an alias adds: the model it is sent,
// and its metric children.
type modelTarget struct {
	model string
	// key is (service, alias, upstream, model): its modelSeries key.
	key                [4]string
	codes              codeCounters
	ttft               prometheus.Observer
	prompt, completion prometheus.Counter
}

// handles reports whether a request for path, under basePath, is one
// whose body names its model.
func (m *modelRoutes) handles(path, basePath string) bool {
	rest := path
	if basePath != "/" {
		rest = path[len(basePath):]
	}
	for _, p := range modelPaths {
		if rest == p {
			return true
		}
	}
	return false
}

// alias returns the alias called name, nil when there is none.
func (m *modelRoutes) alias(name string) *modelAlias {
	for _, a := range m.aliases {
		if a.name == name {
			return a
		}
	}
	return nil
}

// compileModels compiles the model aliases of service s into cs (under
// applyMu).
func (p *Proxy) compileModels(s config.Service, cs *service, t *Table, gen string) error {
	if len(s.Models) == 0 {
		return nil
	}
	mr := &modelRoutes{maxBody: int64(s.ModelMaxBodyBytes())}
	for _, a := range s.Models {
		ca := &modelAlias{name: a.Alias}
		switch {
		case a.Affinity == config.AffinityUser:
			ca.affinity = affinityUser
		case a.Affinity == config.AffinityCookie:
			if s.Sticky == nil {
				return errors.New("alias " + strconv.Quote(a.Alias) + ": cookie affinity without sticky")
			}
			ca.affinity = affinityCookie
		case a.AffinityHeader() != "":
			ca.affinity, ca.header = affinityHeader, strings.ToLower(a.AffinityHeader())
		}
		weights := make([]int, len(a.Targets))
		for i, mt := range a.Targets {
			u, ok := t.upstreams[mt.Upstream]
			if !ok {
				return errors.New("alias " + strconv.Quote(a.Alias) + ": unknown upstream " + strconv.Quote(mt.Upstream))
			}
			weights[i] = mt.Weight
			tg := p.newTarget(s.Name, u, oneValue(gen))
			tg.model = p.modelTarget(s.Name, a.Alias, u.name, mt.Model)
			ca.targets = append(ca.targets, tg)
		}
		sp, err := split.New(weights)
		if err != nil {
			return errors.New("alias " + strconv.Quote(a.Alias) + ": " + err.Error())
		}
		ca.sp.Store(sp)
		if a.CanaryAnalysis != nil && len(ca.targets) == 2 {
			ca.group = config.ModelGroupName(s.Name, a.Alias)
			ca.canary = &canaryGroup{total: weights[0] + weights[1], weight: p.m.canaryWeight.WithLabelValues(ca.group)}
			ca.canary.weight.Set(float64(weights[1]))
			for _, tg := range ca.targets {
				tg.rec = canary.NewRecorder()
			}
			t.modelCanaries = append(t.modelCanaries, ca)
		}
		mr.aliases = append(mr.aliases, ca)
	}
	cs.models = mr
	return nil
}

// routeModel routes v, a POST to a model path of svc: it reads and scans
// the body and, for an alias, picks its target (rt gets it, with the body
// to send) and reports true. It reports true with rt's Status set for a
// body it refuses. It reports false for a request that goes on to the
// service's split: rt.Body is then the body as read. key is Route's key
// (the sticky handle, else the request id), balKey the endpoint
// balancers' affinity key.
func (p *Proxy) routeModel(svc *service, v *Request, rt *Route, key, balKey string) bool {
	m := svc.models
	if v.Body == nil || v.Upgrade != "" {
		return false
	}
	if v.Length > m.maxBody {
		*rt = tooLarge(svc, m, v.Length)
		return true
	}
	if v.Length == 0 {
		*rt = Route{Status: statusBadRequest, Title: "Bad request body", Detail: "a POST to this path needs a JSON object body with a \"model\""}
		return true
	}
	b := getModelBody()
	n, err := b.fill(v.Body.RequestBody(), v.Length, m.maxBody)
	switch {
	case errors.Is(err, errModelBodyTooLarge):
		b.Release()
		*rt = tooLarge(svc, m, -1)
		return true
	case err != nil:
		b.Release()
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			*rt = Route{Status: statusRequestTimeout, Title: "Request timeout", Detail: "the request body stalled"}
		} else {
			*rt = Route{Status: statusBadRequest, Title: "Bad request body", Detail: "the request body could not be read whole"}
		}
		return true
	}
	v.Length, v.Trailers = int64(n), v.Trailers[:0]
	f, err := modelreq.ScanView(b.raw)
	if err != nil {
		b.Release()
		*rt = Route{Status: statusBadRequest, Title: "Bad request body",
			Detail: "the body must be one JSON object with a string \"model\" (and at most one \"model\" and \"user\"): " + err.Error()}
		return true
	}
	rt.Body = b
	var a *modelAlias
	if f.HasModel {
		a = m.alias(f.Model)
	}
	if a == nil {
		return false // the service's own split, with the body as read
	}
	pickKey := v.RequestID
	switch a.affinity {
	case affinityUser:
		if f.User != "" {
			pickKey = f.User
		}
	case affinityHeader:
		if h, ok := v.Header(a.header); ok && h != "" {
			pickKey = h
		}
	case affinityCookie:
		pickKey = key
	}
	h := split.Hash(pickKey)
	sp := a.sp.Load()
	ti := sp.PickHash(h)
	tg := a.targets[ti]
	ei := tg.Up.balancer.Pick(balKey)
	if ei < 0 {
		tg.failovers.Inc()
		excluded := uint8(1) << ti
		for ei < 0 {
			if ti = sp.PickExcluding(h, excluded); ti < 0 {
				b.Release()
				*rt = Route{Status: statusBadGateway, Title: "No healthy upstream",
					Detail: "every endpoint of every target of model " + a.name + " of service " + svc.name + " is down"}
				return true
			}
			tg = a.targets[ti]
			if ei = tg.Up.balancer.Pick(balKey); ei < 0 {
				excluded |= 1 << ti
			}
		}
	}
	// The pick read f's views of b.raw; the rewrite goes to b.out.
	b.out = modelreq.Rewrite(b.out[:0], b.raw, f, tg.model.model)
	b.send = b.out
	v.Length = int64(len(b.out))
	rt.Target, rt.Endpoint = tg, tg.Up.endpoints[ei]
	return true
}

func tooLarge(svc *service, m *modelRoutes, n int64) Route {
	what := "the request body is over"
	if n > 0 {
		what = "the request body is " + strconv.FormatInt(n, 10) + " bytes, over"
	}
	return Route{Status: statusContentTooLarge, Title: "Request body too large",
		Detail: what + " the " + strconv.FormatInt(m.maxBody, 10) + " bytes (max_body_bytes) service " + svc.name + " reads to find the model"}
}

// BodySource gives Route the client's request body, for a request whose
// route depends on it (a service's model aliases): the stream as the
// front reads it, under the stall timeout. Fronts implement it on their
// per-request state, so that setting it does not allocate, and Route
// calls it only for such a request.
type BodySource interface {
	RequestBody() io.Reader
}

// ModelBody is a request body Route read (to route it by its model): the
// front sends it instead of the client's stream, with the Request's
// Length, and releases it once the request is sent. Close does nothing,
// so a server that closes the request's body does not give it back early.
type ModelBody struct {
	raw, out []byte
	// send is what is sent: raw, or out when the model was rewritten.
	send []byte
	off  int
}

var modelBodies sync.Pool

func getModelBody() *ModelBody {
	b, _ := modelBodies.Get().(*ModelBody)
	if b == nil {
		b = new(ModelBody)
	}
	return b
}

var errModelBodyTooLarge = errors.New("request body over max_body_bytes")

// fill reads the body from r: length bytes, or (-1) up to its end, at
// most limit. It returns the bytes read.
func (b *ModelBody) fill(r io.Reader, length, limit int64) (int, error) {
	if length > 0 {
		if int64(cap(b.raw)) < length {
			b.raw = make([]byte, length)
		}
		b.raw = b.raw[:length]
		if _, err := io.ReadFull(r, b.raw); err != nil {
			return 0, err
		}
		b.send, b.off = b.raw, 0
		return int(length), nil
	}
	b.raw = b.raw[:0]
	for {
		if len(b.raw) == cap(b.raw) {
			b.raw = append(b.raw, 0)[:len(b.raw)]
		}
		n, err := r.Read(b.raw[len(b.raw):cap(b.raw)])
		b.raw = b.raw[:len(b.raw)+n]
		if int64(len(b.raw)) > limit {
			return 0, errModelBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	b.send, b.off = b.raw, 0
	return len(b.raw), nil
}

// Read reads the body to send.
func (b *ModelBody) Read(p []byte) (int, error) {
	if b.off >= len(b.send) {
		return 0, io.EOF
	}
	n := copy(p, b.send[b.off:])
	b.off += n
	return n, nil
}

// Close does nothing (see ModelBody).
func (b *ModelBody) Close() error { return nil }

// Release gives b back to the pool; nil is a no-op.
func (b *ModelBody) Release() {
	if b == nil {
		return
	}
	b.send, b.off = nil, 0
	if cap(b.raw) <= 1<<20 && cap(b.out) <= 1<<20 { // do not keep the rare huge ones
		modelBodies.Put(b)
	}
}

// modelTarget returns the metric children of an alias target, kept
// across generations while it exists. Called under applyMu.
func (p *Proxy) modelTarget(service, alias, upstream, model string) *modelTarget {
	k := [4]string{service, alias, upstream, model}
	if mt := p.modelSeries[k]; mt != nil {
		return mt
	}
	if p.modelSeries == nil {
		p.modelSeries = map[[4]string]*modelTarget{}
	}
	mt := &modelTarget{
		model:      model,
		ttft:       p.m.modelTTFT.WithLabelValues(service, alias, upstream),
		prompt:     p.m.modelTokens.WithLabelValues(service, alias, upstream, "prompt"),
		completion: p.m.modelTokens.WithLabelValues(service, alias, upstream, "completion"),
	}
	mt.codes.vec, mt.codes.labels, mt.key = p.m.modelRequests, k[:], k
	p.modelSeries[k] = mt
	return mt
}

// retainModelMetrics deletes the series of the alias targets table t no
// longer has. Called under applyMu.
func (p *Proxy) retainModelMetrics(t *Table) {
	keep := map[[4]string]bool{}
	keep3 := map[[3]string]bool{}
	for _, svc := range t.services() {
		if svc.models == nil {
			continue
		}
		for _, a := range svc.models.aliases {
			for _, tg := range a.targets {
				keep[tg.model.key] = true
				keep3[[3]string{svc.name, a.name, tg.Up.name}] = true
			}
		}
	}
	for k := range p.modelSeries {
		if keep[k] {
			continue
		}
		delete(p.modelSeries, k)
		p.m.modelRequests.DeletePartialMatch(prometheus.Labels{"service": k[0], "alias": k[1], "upstream": k[2], "model": k[3]})
		if k3 := [3]string{k[0], k[1], k[2]}; !keep3[k3] {
			p.m.modelTTFT.DeleteLabelValues(k[0], k[1], k[2])
			p.m.modelTokens.DeletePartialMatch(prometheus.Labels{"service": k[0], "alias": k[1], "upstream": k[2]})
		}
	}
}

// tapTail is how many of an answer's last bytes the tap keeps to find its
// usage.
const tapTail = 2048

// answerTap reads the answer of an alias request for the front (it is
// its AnswerStream), watching it go by: the first event with content
// (TTFT) and the usage in its tail. It lives with the connection, so it
// allocates nothing after the connection's first alias answer.
type answerTap struct {
	m      *modelTarget     // nil: no tap
	rec    *canary.Recorder // the target's canary recorder; nil outside a model group
	body   *answerBody
	sent   time.Time
	stream bool // an event stream
	// first: the first event with content was seen; done: the usage was
	// looked for (or will not be).
	first, done bool
	n           int
	tail        [tapTail]byte
}

// tapAnswer taps the answer just read on c for alias target m, whose
// request was sent at sent. A body the connection holds whole already is
// looked at now: a front may copy it out of the buffer without reading it.
func (c *Conn) tapAnswer(m *modelTarget, rec *canary.Recorder, sent time.Time) {
	if c.tap == nil {
		c.tap = new(answerTap)
	}
	t := c.tap
	t.m, t.rec, t.body, t.sent, t.n, t.first, t.done = m, rec, &c.answer, sent, 0, false, false
	t.stream = bytes.HasPrefix(c.Head.First("Content-Type"), []byte("text/event-stream"))
	if c.Head.Status != 200 || c.Head.Framing == bodyNone {
		t.done = true
		return
	}
	if c.BodyBuffered() {
		b, _ := c.Reader.Peek(c.Head.BodyLength())
		t.observe(b)
		t.finish()
	}
}

// Read reads the answer's body, watching it.
func (t *answerTap) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	if t.done {
		return n, err
	}
	if n > 0 {
		t.observe(p[:n])
	}
	if err == io.EOF || (t.body.framing == BodyLength && t.body.left == 0) {
		t.finish()
	}
	return n, err
}

// observe looks at the next bytes b of the answer.
func (t *answerTap) observe(b []byte) {
	if t.stream && !t.first && hasContentEvent(b) {
		t.first = true
		d := time.Since(t.sent)
		t.m.ttft.Observe(d.Seconds())
		if t.rec != nil {
			t.rec.ObserveTTFT(d)
		}
	}
	if len(b) >= tapTail {
		t.n = copy(t.tail[:], b[len(b)-tapTail:])
		return
	}
	if keep := tapTail - len(b); t.n > keep {
		copy(t.tail[:], t.tail[t.n-keep:t.n])
		t.n = keep
	}
	t.n += copy(t.tail[t.n:], b)
}

// finish counts the tokens of the usage found in the tail.
func (t *answerTap) finish() {
	t.done = true
	prompt, completion, ok := findUsage(t.tail[:t.n])
	if !ok {
		return
	}
	t.m.prompt.Add(float64(prompt))
	t.m.completion.Add(float64(completion))
}

// hasContentEvent reports whether b holds a "data:" line, other than
// [DONE], with a non-empty "content", "text" or "delta" string (chat
// completions, completions, responses).
func hasContentEvent(b []byte) bool {
	for {
		i := bytes.Index(b, []byte("data:"))
		if i < 0 {
			return false
		}
		b = b[i+5:]
		line := b
		if j := bytes.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		if nonEmptyString(line, `"content"`) || nonEmptyString(line, `"text"`) || nonEmptyString(line, `"delta"`) {
			return true
		}
	}
}

// nonEmptyString reports whether b holds key followed by a colon and a
// string that is not empty.
func nonEmptyString(b []byte, key string) bool {
	for {
		i := bytes.Index(b, []byte(key))
		if i < 0 {
			return false
		}
		b = b[i+len(key):]
		r := skipSpace(b)
		if len(r) == 0 || r[0] != ':' {
			continue
		}
		r = skipSpace(r[1:])
		if len(r) >= 2 && r[0] == '"' && r[1] != '"' {
			return true
		}
	}
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// findUsage reads the token counts of the last "usage" object in b:
// prompt_tokens and completion_tokens (or the responses API's
// input_tokens and output_tokens).
func findUsage(b []byte) (prompt, completion int64, ok bool) {
	i := bytes.LastIndex(b, []byte(`"usage"`))
	if i < 0 {
		return 0, 0, false
	}
	r := skipSpace(b[i+len(`"usage"`):])
	if len(r) == 0 || r[0] != ':' {
		return 0, 0, false
	}
	if r = skipSpace(r[1:]); len(r) == 0 || r[0] != '{' {
		return 0, 0, false // null, or cut
	}
	p, okP := intField(r, `"prompt_tokens"`)
	if !okP {
		p, okP = intField(r, `"input_tokens"`)
	}
	c, okC := intField(r, `"completion_tokens"`)
	if !okC {
		c, okC = intField(r, `"output_tokens"`)
	}
	return p, c, okP || okC
}

// intField reads the integer after key and a colon in b.
func intField(b []byte, key string) (int64, bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	r := skipSpace(b[i+len(key):])
	if len(r) == 0 || r[0] != ':' {
		return 0, false
	}
	r = skipSpace(r[1:])
	var n int64
	d := 0
	for d < len(r) && r[d] >= '0' && r[d] <= '9' && d < 12 {
		n = n*10 + int64(r[d]-'0')
		d++
	}
	return n, d > 0
}
