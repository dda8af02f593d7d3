// Package cli is the command line of Dwara's REST API: the verbs apply,
// flip, weights, kill, rollback, history, diff, get, canary, adopt, pause
// and resume of the dwara command. Each
// verb parses its flags, calls the API through package client and prints a
// short summary (or, with --json, the API's answer). Specs are read with
// the one spec decoder of gateway/config, so a file the gateway would refuse
// is refused here with the same messages before anything is sent.
//
// Like the client, it speaks only the API's wire types (api/apiv1); it never
// imports the server or the database.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/client"
	"github.com/dwara/dwara/gateway/config"
)

// Usage is the client verbs' part of the dwara command's usage text.
const Usage = `Client verbs (they call the REST API of a running "dwara serve"):
  dwara apply -f FILE [-m MESSAGE] [--dry-run] [--if-match ID]    publish a YAML or JSON spec (-f - reads stdin)
  dwara flip SERVICE [-m MESSAGE]                                  swap the weights of a 2-target split
  dwara weights SERVICE UPSTREAM=W... [--allow-reshuffle] [-m MESSAGE]
                                                                   set split weights (the total must stay)
  dwara kill SERVICE [-m MESSAGE]                                  every target but the first to 0
  dwara rollback ID [-m MESSAGE]                                   publish the spec of generation ID again
  dwara history [--limit N] [--cursor C]                           generations, newest first (N: 1..500)
  dwara diff [ID] [--against ID]                                   what generation ID (default: the active one)
                                                                   changed, and the share of keys it moves
  dwara get services [SERVICE...]                                 the active generation's services: route, weights,
                                                                   and match rules (name, conditions, target)
  dwara canary [SERVICE]                                           canary groups: state, weights, the window's
                                                                   figures, and the last 10 canary events
  dwara canary promote SERVICE [-m MESSAGE]                        pass the gate SERVICE's canary waits at
  dwara adopt SERVICE [-m MESSAGE]                                 publish the canary weights in force as configured
  dwara pause SERVICE [-m MESSAGE]                                 hold the canary controller off a group
  dwara resume SERVICE [-m MESSAGE]                                let the canary controller act on it again
  dwara cache purge SERVICE [--path-prefix P] [-m MESSAGE]         empty SERVICE's response cache (or under P)
  dwara probe SERVICE [--branch NAME] [--count N] [--proxy URL]    forced requests to each branch, through a gateway
  dwara export --format httproute [SERVICE...] [--upstreams FILE]  the services as Gateway API HTTPRoutes
  dwara import -f ROUTES --upstreams FILE [--dry-run]              publish HTTPRoutes as a generation
  dwara config view|get-contexts|current-context|use-context NAME|set-context NAME|delete-context NAME
                                                                   the client configuration file's contexts
  Flags of every client verb, before or after it: --api URL (default $DWARA_API_URL, else the context's, else
  ` + client.DefaultURL + `), --context NAME, --config-file FILE (default $DWARA_CONFIG, else
  ~/.config/dwara/config.yaml), --token-file FILE (default $DWARA_ADMIN_TOKEN, else the context's), --cacert FILE,
  --insecure-skip-tls-verify, -o json|yaml|wide|name (--json is -o json), --timeout 30s; of the verbs that change
  something: --actor NAME (default: the context's, else $USER).
`

// clientVerb is one client verb: its argument synopsis, what it does, whether
// it changes something (and so takes --actor), the -o formats it prints
// besides its summary, whether it runs without the API (local), and the
// function that registers its own flags and returns the action to run once
// they are parsed.
type clientVerb struct {
	synopsis string
	summary  string
	mutating bool
	outputs  []string
	setup    func(fs *flag.FlagSet) func(ctx context.Context, cc *clientCall, args []string) error
	local    bool
}

// The -o formats of the verbs: what a change prints (the generation or
// the group it made), and what a listing prints.
var (
	changeOutputs  = []string{outputJSON, outputYAML, outputName}
	listingOutputs = []string{outputJSON, outputYAML, outputWide, outputName}
)

var clientVerbs = map[string]clientVerb{
	"apply": {"-f FILE [-m MESSAGE] [--dry-run] [--if-match ID]",
		"Publish the spec in FILE (YAML or JSON; - reads stdin) as a new generation.", true, changeOutputs, setupApply, false},
	"flip": {"SERVICE [-m MESSAGE] [--if-match ID]",
		"Swap the two weights of SERVICE's 2-target split (blue-green).", true, changeOutputs, setupEdit("flip"), false},
	"weights": {"SERVICE UPSTREAM=WEIGHT... [--allow-reshuffle] [-m MESSAGE] [--if-match ID]",
		"Set the weights of SERVICE's split targets; the total must stay unless --allow-reshuffle.", true, changeOutputs, setupWeights, false},
	"kill": {"SERVICE [-m MESSAGE] [--if-match ID]",
		"Send all of SERVICE's traffic to its first target (every other target to 0).", true, changeOutputs, setupEdit("kill"), false},
	"rollback": {"ID [-m MESSAGE] [--if-match ID]",
		"Publish the spec of generation ID again, as a new generation.", true, changeOutputs, setupRollback, false},
	"history": {"[--limit N] [--cursor C]",
		"List the generations, newest first, a page at a time.", false, listingOutputs, setupHistory, false},
	"diff": {"[ID] [--against ID]",
		"Show what generation ID (default: the active one) changed, and the share of keys it moves.", false, listingOutputs, setupDiff, false},
	"get": {"services [SERVICE...]",
		"Show the active generation's services (or those named): route, weights, and each match rule's name, conditions and target, in the order they are checked.",
		false, listingOutputs, setupGet, false},
	"canary": {"[SERVICE] | promote SERVICE [-m MESSAGE]",
		"Show the canary groups (or SERVICE's) and the last 10 canary events; promote passes the gate SERVICE's canary waits at.", true, listingOutputs, setupCanary, false},
	"adopt": {"SERVICE [-m MESSAGE] [--if-match ID]",
		"Publish the canary weights in force for SERVICE as a generation.", true, changeOutputs, setupAdopt, false},
	"pause": {"SERVICE [-m MESSAGE]",
		"Hold the canary controller off SERVICE's group until it is resumed.", true, changeOutputs, setupHold(true), false},
	"resume": {"SERVICE [-m MESSAGE]",
		"Let the canary controller act on SERVICE's group again.", true, changeOutputs, setupHold(false), false},
	"cache": {"purge SERVICE [--path-prefix P] [-m MESSAGE]",
		"Empty SERVICE's response cache in the processes the API reaches (the embedded proxy of dwara serve), or only its entries whose path starts with P.",
		true, []string{outputJSON, outputYAML, outputName}, setupCache, false},
	"probe": {"SERVICE [--branch NAME] [--count N] [--proxy URL] [--path P]",
		"Send forced requests to each branch of SERVICE (its override header) through a gateway; print statuses and latencies.",
		false, []string{outputJSON, outputYAML}, setupProbe, false},
	"export": {"--format httproute [SERVICE...] [--upstreams FILE] [--namespace NS] [--gateway NAME]",
		"Write the active generation's services (or those named) as Gateway API HTTPRoutes (YAML; -o json: a List), and the upstreams they name to FILE.",
		false, []string{outputJSON, outputYAML}, setupExport, false},
	"import": {"-f ROUTES --upstreams FILE [-m MESSAGE] [--dry-run] [--if-match ID]",
		"Publish Gateway API HTTPRoutes (with the upstreams they name, in Dwara's schema) as a generation; a field Dwara cannot serve is refused.",
		true, changeOutputs, setupImport, false},
	"config": {"view | get-contexts | current-context | use-context NAME | set-context NAME [--api URL] [--token-file FILE] [--cacert FILE] [--insecure-skip-tls-verify] [--actor NAME] | delete-context NAME",
		"Show or change the client configuration file: named contexts, each an API URL with its token file and CA.",
		false, []string{outputJSON, outputYAML, outputName}, setupConfig, true},
}

// Verbs returns the names of the client verbs, sorted.
func Verbs() []string {
	names := make([]string, 0, len(clientVerbs))
	for name := range clientVerbs {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// WriteUsage writes the usage text of `dwara verb` in the one style of
// every dwara command: "usage: dwara VERB SYNOPSIS", the summary, and every
// flag of fs, long names with two dashes (the flag package takes one or
// two), one-letter names with one.
func WriteUsage(w io.Writer, verb, synopsis, summary string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: dwara %s %s\n", verb, synopsis)
	if summary != "" {
		fmt.Fprintf(w, "\n%s\n", summary)
	}
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			fmt.Fprint(w, "\nFlags:\n")
			first = false
		}
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		arg, usage := flag.UnquoteUsage(f)
		line := "  " + dash + f.Name
		if arg != "" {
			line += " " + arg
		}
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" {
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(w, "%s\n        %s\n", line, strings.ReplaceAll(usage, "\n", "\n        "))
	})
}

// IO is what a client verb reads and writes: the process's streams and
// environment in main, buffers and a map in tests. Every field is required.
type IO struct {
	In     io.Reader
	Out    io.Writer
	Err    io.Writer
	Getenv func(string) string
}

// IsVerb reports whether name is one of the client verbs.
func IsVerb(name string) bool {
	_, ok := lookupVerb(name)
	return ok
}

// clientCall is one run of a client verb.
type clientCall struct {
	verb    string
	io      IO
	c       *client.Client // nil for a local verb
	globals *globals
	output  string
	service string         // the SERVICE argument
	weights map[string]int // the weights asked for, of the weights verb
	answer  []byte         // the last answer body, for -o json and yaml
}

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// Misuse writes a usage mistake in the one style of every dwara command:
// the problem, the synopsis, and where the rest is, so the problem does not
// scroll away under the whole usage text.
func Misuse(w io.Writer, verb, synopsis, problem string) {
	fmt.Fprintf(w, "dwara %s: %s\n", verb, problem)
	fmt.Fprintf(w, "usage: dwara %s %s\n", verb, synopsis)
	fmt.Fprintf(w, "Run \"dwara %s --help\" for its flags.\n", verb)
}

// Run runs the client verb args[0] with the arguments args[1:] and returns
// the exit status: 0 done (or --help, whose usage text goes to s.Out), 1 the
// call failed (the reason is on s.Err), 2 a usage mistake ("dwara VERB:
// problem" and the verb's synopsis on s.Err). Global flags may come before
// the verb.
func Run(ctx context.Context, args []string, s IO) int {
	if len(args) == 0 {
		fmt.Fprintln(s.Err, "dwara: no command")
		return 2
	}
	args, err := hoistVerb(args)
	if err != nil {
		fmt.Fprintf(s.Err, "dwara: %v\n", err)
		return 2
	}
	verb := args[0]
	v, ok := lookupVerb(verb)
	if !ok {
		fmt.Fprintf(s.Err, "dwara: unknown command %q\n", verb)
		return 2
	}
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are written below, in dwara's style
	fs.Usage = func() {}
	synopsis := v.synopsis + " [flags]"
	usage := func(w io.Writer) { WriteUsage(w, verb, synopsis, v.summary, fs) }
	g := &globals{}
	g.register(fs, v.mutating)
	action := v.setup(fs)

	misuse := func(msg string) int {
		Misuse(s.Err, verb, synopsis, msg)
		return 2
	}
	rest, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		usage(s.Out)
		return 0
	}
	if err != nil {
		return misuse(FlagError(err))
	}
	if g.timeout <= 0 {
		return misuse("--timeout must be positive")
	}
	if err := g.checkOutput(verb, v.outputs); err != nil {
		return misuse(err.Error())
	}
	cc := &clientCall{verb: verb, io: s, globals: g, output: g.output}
	if !v.local {
		conn, err := g.connect(s, v.mutating)
		if ue, ok := errors.AsType[usageError](err); ok {
			return misuse(ue.msg)
		}
		if err != nil {
			fmt.Fprintf(s.Err, "dwara %s: %v\n", verb, err)
			return 1
		}
		cc.c, err = client.New(client.Options{
			URL:        conn.url,
			Token:      conn.token,
			Actor:      conn.actor,
			HTTPClient: &http.Client{Timeout: g.timeout, Transport: conn.transport},
			Answer:     func(_ int, body []byte) { cc.answer = body },
		})
		if err != nil {
			return misuse(err.Error())
		}
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	err = action(ctx, cc, rest)
	if err == nil {
		return 0
	}
	if ue, ok := errors.AsType[usageError](err); ok {
		return misuse(ue.msg)
	}
	cc.report(ctx, err, g.timeout)
	return 1
}

// parseInterspersed parses fs from args while allowing flags after the
// positional arguments ("dwara flip api -m why"), which the flag package
// alone does not. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// ifMatchFlag registers --if-match and returns its parser.
func ifMatchFlag(fs *flag.FlagSet) func() (*int64, error) {
	v := fs.String("if-match", "", "only if generation `ID` is the active one (0: no generation yet); else 412")
	return func() (*int64, error) {
		if *v == "" {
			return nil, nil
		}
		id, err := strconv.ParseInt(*v, 10, 64)
		if err != nil || id < 0 {
			return nil, usagef("--if-match must be a generation id, not %q", *v)
		}
		return &id, nil
	}
}

// generationID parses a generation id argument named what.
func generationID(what, v string) (int64, error) {
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return 0, usagef("%s must be a generation id (a positive integer), not %q", what, v)
	}
	return id, nil
}

func setupApply(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	file := fs.String("f", "", "the spec `FILE`, YAML or JSON (- reads stdin)")
	message := fs.String("m", "", "the change `MESSAGE`, stored with the generation")
	dryRun := fs.Bool("dry-run", false, "validate and show the impact without storing anything")
	ifMatch := ifMatchFlag(fs)
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) > 0 {
			return usagef("unexpected argument %q (the spec is given with -f FILE)", args[0])
		}
		if *file == "" {
			return usagef("-f FILE is required (- reads stdin)")
		}
		match, err := ifMatch()
		if err != nil {
			return err
		}
		spec, msg, err := readSpec(cc.io.In, *file)
		if err != nil {
			return err
		}
		if *message != "" {
			msg = *message
		}
		if msg == "" {
			msg = "apply " + filepath.Base(specName(*file))
		}
		return cc.publish(ctx, msg, spec, client.CreateOptions{DryRun: *dryRun, IfMatch: match})
	}
}

// publish publishes spec (or, with o.DryRun, checks it) and prints the
// generation, or the dry run's impact.
func (cc *clientCall) publish(ctx context.Context, msg string, spec json.RawMessage, o client.CreateOptions) error {
	res, err := cc.c.Create(ctx, msg, spec, o)
	if err != nil {
		return err
	}
	if cc.printAnswer() {
		return nil
	}
	if res.DryRun != nil {
		if cc.output == outputName {
			printChangedServices(cc.io.Out, res.DryRun.Impact)
			return nil
		}
		fmt.Fprintln(cc.io.Out, "dry run: the spec is valid; nothing was stored")
		printDiff(cc.io.Out, res.DryRun.Impact, false)
		return nil
	}
	return cc.generation(*res.Generation, nil)
}

// readSpec reads the spec file name ("-": in) with the one spec decoder and
// returns it as normalized JSON. The file is just the spec, as for `dwara
// gateway --config`; a file holding a whole request body ({"message": ...,
// "spec": ...}, as in the curl examples) is accepted too, and its message
// returned. A spec that fails to decode or validate is a *specError listing
// every problem; nothing is sent.
func readSpec(in io.Reader, name string) (json.RawMessage, string, error) {
	data, err := readInput(in, name)
	if err != nil {
		return nil, "", err
	}
	env, err := parseDocument(data)
	if ve, ok := errors.AsType[*config.ValidationError](err); ok {
		return nil, "", &specError{file: specName(name), errs: ve.Errors}
	}
	if err != nil {
		return nil, "", fmt.Errorf("read spec %s: %w", specName(name), err)
	}
	js, err := json.Marshal(env.Spec)
	if err != nil {
		return nil, "", fmt.Errorf("encode spec %s: %w", specName(name), err)
	}
	return js, env.Message, nil
}

// readInput reads the file name ("-": in, bounded as the API bounds a
// body); an empty one is an error.
func readInput(in io.Reader, name string) ([]byte, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(io.LimitReader(in, apiv1.MaxBodyBytes+1))
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", specName(name), err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("read %s: it is empty", specName(name))
	}
	return data, nil
}

// parseDocument reads a spec file with the one decoder: a spec, or a whole
// request body (config.ParseDocument). A request body whose JSON does not
// parse (a trailing comma, say) is read as a spec, so the decoder lists its
// "message" and "spec" as unknown fields of a spec before the syntax error
// with its line and column: only the syntax error is kept then.
func parseDocument(data []byte) (config.Envelope, error) {
	env, err := config.ParseDocument(data)
	ve, ok := errors.AsType[*config.ValidationError](err)
	if !ok || !ve.Malformed || !brokenEnvelope(data) {
		return env, err
	}
	kept := &config.ValidationError{Malformed: true}
	for _, fe := range ve.Errors {
		if (fe.Path == "message" || fe.Path == "spec") && strings.HasPrefix(fe.Message, "unknown field") {
			continue
		}
		kept.Errors = append(kept.Errors, fe)
	}
	return env, kept
}

// brokenEnvelope reports whether data is a JSON object whose top-level
// fields before its first syntax error are only "message" and "spec", with
// "spec" among them.
func brokenEnvelope(data []byte) bool {
	data = bytes.TrimLeft(bytes.TrimPrefix(data, []byte("\uFEFF")), " \t\r\n")
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	_, _ = dec.Token() // "{"
	spec := false
	for {
		tok, err := dec.Token()
		key, isKey := tok.(string)
		if err != nil || !isKey {
			return spec // the end of the object, or a syntax error
		}
		switch key {
		case "spec":
			spec = true
		case "message":
		default:
			return false
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return spec
		}
	}
}

// specName names the spec file in messages: "stdin" for "-".
func specName(name string) string {
	if name == "-" {
		return "stdin"
	}
	return name
}

// specError is a spec refused by the decoder before anything was sent.
type specError struct {
	file string
	errs []config.FieldError
	// what is what the file holds, when not a spec ("the HTTPRoutes").
	what string
}

func (e *specError) Error() string {
	if e.what != "" {
		return fmt.Sprintf("%s in %s cannot be served as they are", e.what, e.file)
	}
	return fmt.Sprintf("the spec in %s is invalid", e.file)
}

// setupEdit is the setup of flip and kill, which differ only in the call.
func setupEdit(verb string) func(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	return func(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
		message := fs.String("m", "", "the change `MESSAGE` (default: \""+verb+" SERVICE\")")
		ifMatch := ifMatchFlag(fs)
		return func(ctx context.Context, cc *clientCall, args []string) error {
			if len(args) != 1 {
				return usagef("give exactly one SERVICE")
			}
			match, err := ifMatch()
			if err != nil {
				return err
			}
			o := client.EditOptions{Message: *message, IfMatch: match}
			call := cc.c.Flip
			if verb == "kill" {
				call = cc.c.Kill
			}
			g, err := call(ctx, args[0], o)
			return cc.generation(g, err)
		}
	}
}

func setupWeights(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	message := fs.String("m", "", "the change `MESSAGE` (default: \"weights SERVICE\")")
	reshuffle := fs.Bool("allow-reshuffle", false, "accept a change of the total weight, which reshuffles every key between targets")
	ifMatch := ifMatchFlag(fs)
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) < 2 {
			return usagef("give a SERVICE and at least one UPSTREAM=WEIGHT")
		}
		weights := make(map[string]int, len(args)-1)
		for _, a := range args[1:] {
			name, val, ok := strings.Cut(a, "=")
			w, err := strconv.Atoi(val)
			switch {
			case !ok || name == "":
				return usagef("%q is not UPSTREAM=WEIGHT", a)
			case err != nil || w < 0:
				return usagef("the weight in %q must be a non-negative integer", a)
			}
			if _, dup := weights[name]; dup {
				return usagef("upstream %q is given twice", name)
			}
			weights[name] = w
		}
		match, err := ifMatch()
		if err != nil {
			return err
		}
		cc.service, cc.weights = args[0], weights
		g, err := cc.c.SetWeights(ctx, args[0], weights, *reshuffle, client.EditOptions{Message: *message, IfMatch: match})
		return cc.generation(g, err)
	}
}

func setupRollback(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	message := fs.String("m", "", "the change `MESSAGE` (default: \"rollback to generation ID\")")
	ifMatch := ifMatchFlag(fs)
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) != 1 {
			return usagef("give exactly one generation ID to roll back to")
		}
		id, err := generationID("ID", args[0])
		if err != nil {
			return err
		}
		match, err := ifMatch()
		if err != nil {
			return err
		}
		g, err := cc.c.Rollback(ctx, id, client.EditOptions{Message: *message, IfMatch: match})
		return cc.generation(g, err)
	}
}

// idOrDash formats an optional generation id: the id, or "-".
func idOrDash(id *int64) string {
	if id == nil {
		return "-"
	}
	return strconv.FormatInt(*id, 10)
}

// maxHistoryLimit is the largest page the API lists (its ?limit= takes
// 1..500).
const maxHistoryLimit = 500

func setupHistory(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	limit := fs.Int("limit", 0, "at most `N` generations, 1..500 (default: the API's, 50)")
	cursor := fs.String("cursor", "", "start after this cursor `C` (the hint printed under the previous page)")
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) > 0 {
			return usagef("unexpected argument %q", args[0])
		}
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "limit" })
		if given && (*limit < 1 || *limit > maxHistoryLimit) {
			return usagef("--limit must be from 1 to %d, not %d", maxHistoryLimit, *limit)
		}
		page, err := cc.c.List(ctx, *limit, *cursor)
		if err != nil {
			return err
		}
		// The hint to the next page goes to stderr, so a pipe gets rows
		// only, whatever the format.
		defer func() {
			if page.NextCursor != "" {
				more := "dwara history --cursor " + page.NextCursor
				if *limit != 0 {
					more = fmt.Sprintf("dwara history --limit %d --cursor %s", *limit, page.NextCursor)
				}
				fmt.Fprintf(cc.io.Err, "more: %s\n", more)
			}
		}()
		if cc.printAnswer() {
			return nil
		}
		w := cc.io.Out
		if cc.output == outputName {
			for _, g := range page.Items {
				fmt.Fprintf(w, "generation/%d\n", g.ID)
			}
			return nil
		}
		if len(page.Items) == 0 {
			fmt.Fprintln(w, "no generations")
			return nil
		}
		wide := cc.output == outputWide
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if wide {
			fmt.Fprintln(tw, "ID\tPARENT\tACTION\tSOURCE\tAUTHOR\tCREATED\tMESSAGE")
		} else {
			fmt.Fprintln(tw, "ID\tACTION\tSOURCE\tAUTHOR\tCREATED\tMESSAGE")
		}
		for _, g := range page.Items {
			if wide {
				// The full time in UTC, to the second's fraction, and the parent.
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, idOrDash(g.ParentID), clean(g.Action), idOrDash(g.SourceID), clean(g.Author),
					g.CreatedAt.UTC().Format(time.RFC3339Nano), clean(g.Message))
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", g.ID, clean(g.Action), idOrDash(g.SourceID), clean(g.Author),
				g.CreatedAt.Local().Format("2006-01-02 15:04:05 MST"), clean(g.Message))
		}
		tw.Flush()
		return nil
	}
}

func setupDiff(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	against := fs.String("against", "", "compare with generation `ID` (default: the generation's parent)")
	return func(ctx context.Context, cc *clientCall, args []string) error {
		var id, other int64
		var err error
		switch len(args) {
		case 0:
		case 1:
			if id, err = generationID("ID", args[0]); err != nil {
				return err
			}
		default:
			return usagef("give at most one generation ID")
		}
		if *against != "" {
			if other, err = generationID("--against", *against); err != nil {
				return err
			}
		}
		if id == 0 {
			cur, err := cc.c.Current(ctx)
			if err != nil {
				return err
			}
			id = cur.ID
		}
		d, err := cc.c.Diff(ctx, id, other)
		if err != nil {
			return err
		}
		switch {
		case cc.printAnswer():
		case cc.output == outputName:
			printChangedServices(cc.io.Out, d)
		default:
			printDiff(cc.io.Out, d, cc.output == outputWide)
		}
		return nil
	}
}

// canaryEvents is how many of the newest canary events `dwara canary`
// shows.
const canaryEvents = 10

func setupCanary(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	message := fs.String("m", "", "with promote: why, recorded with the promote event")
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) > 0 && args[0] == "promote" {
			if len(args) != 2 {
				return usagef("give exactly one SERVICE to promote")
			}
			g, err := cc.c.PromoteCanary(ctx, args[1], *message)
			if err != nil {
				return err
			}
			switch {
			case cc.printAnswer():
			case cc.output == outputName:
				fmt.Fprintf(cc.io.Out, "service/%s\n", clean(g.Service))
			default:
				fmt.Fprintf(cc.io.Out, "canary group %s: gate passed, %s at %s (generation %d)\n", clean(g.Service), clean(g.State), weightPair(g.Weights), g.GenerationID)
			}
			return nil
		}
		if *message != "" {
			return usagef("-m goes with promote")
		}
		var service string
		switch len(args) {
		case 0:
		case 1:
			service = args[0]
		default:
			return usagef("give at most one SERVICE")
		}
		cc.service = service
		list, err := cc.c.Canary(ctx)
		if err != nil {
			return err
		}
		if cc.printAnswer() {
			return nil
		}
		if cc.output == outputName {
			for _, g := range list.Items {
				if service == "" || g.Service == service {
					fmt.Fprintf(cc.io.Out, "service/%s\n", clean(g.Service))
				}
			}
			return nil
		}
		groups := list.Items
		if service != "" {
			groups = nil
			for _, g := range list.Items {
				if g.Service == service {
					groups = append(groups, g)
				}
			}
			if len(groups) == 0 {
				msg := fmt.Sprintf("service %q is not a canary group of the active generation (a 2-target split, or a model alias SERVICE/ALIAS, with canary_analysis)", service)
				names := make([]string, len(list.Items))
				for i, g := range list.Items {
					names[i] = g.Service
				}
				if near := config.Nearest(service, names); near != "" {
					msg += fmt.Sprintf("; did you mean %q?", near)
				}
				return errors.New(msg)
			}
		}
		events, err := cc.c.CanaryEvents(ctx, service, 0, canaryEvents, "")
		if err != nil {
			return err
		}
		w := cc.io.Out
		if len(groups) == 0 {
			fmt.Fprintln(w, "no canary groups in the active generation")
		} else {
			printCanaryGroups(w, groups, cc.output == outputWide)
		}
		fmt.Fprintln(w)
		printCanaryEvents(w, events.Items)
		return nil
	}
}

// printCanaryGroups prints one row per group: its state, its weights
// (configured, then in force when they differ) and each version's figures
// over the window.
func printCanaryGroups(w io.Writer, groups []apiv1.CanaryGroup, wide bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "SERVICE\tGENERATION\tSTATE\tWEIGHTS\tWINDOW\tBASELINE\tCANARY")
	} else {
		fmt.Fprintln(tw, "SERVICE\tSTATE\tWEIGHTS\tWINDOW\tBASELINE\tCANARY")
	}
	for _, g := range groups {
		name := clean(g.Service)
		if g.Kind == apiv1.CanaryKindModel {
			name += " (model)"
		}
		weights := weightPair(g.Configured)
		if g.Transient || g.Weights != g.Configured {
			weights += " -> " + weightPair(g.Weights)
		}
		state := clean(g.State)
		switch {
		case g.GateWaiting:
			state += " (gate waiting)"
		case g.HoldSince != nil:
			state += " (holding since " + g.HoldSince.UTC().Format("15:04:05 UTC") + ")"
		}
		model := g.Kind == apiv1.CanaryKindModel
		base, can := figuresText(g.BaselineWindow, model), figuresText(g.CanaryWindow, model)
		if wide {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%ds\t%s\t%s\n", name, g.GenerationID, state, weights, g.WindowSeconds, base, can)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%ds\t%s\t%s\n", name, state, weights, g.WindowSeconds, base, can)
	}
	tw.Flush()
}

// printCanaryEvents prints the canary events, newest first: when, which
// group in which generation, the action, the canary's weight before and
// after, and why (and who, for a pause or resume).
func printCanaryEvents(w io.Writer, events []apiv1.CanaryEvent) {
	if len(events) == 0 {
		fmt.Fprintln(w, "no canary events")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tSERVICE\tGENERATION\tACTION\tCANARY WEIGHT\tREASON")
	for _, e := range events {
		reason := clean(e.Reason)
		if e.Actor != "" {
			reason += " (by " + clean(e.Actor) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d->%d\t%s\n", e.CreatedAt.Local().Format("2006-01-02 15:04:05 MST"),
			clean(e.Service), e.GenerationID, clean(e.Action), e.FromWeight, e.ToWeight, reason)
	}
	tw.Flush()
}

// weightPair formats a group's weights as "baseline/canary", e.g. "85/15".
func weightPair(ws [2]int) string {
	return strconv.Itoa(ws[0]) + "/" + strconv.Itoa(ws[1])
}

// figuresText formats one version's figures over the window: "1200 req,
// 0.50% err, p99 12.3ms", or "no requests". Those of a model group (model
// true) add the p99 time to the first streamed token, "ttft p99 210.0ms"
// ("ttft p99 -" when the window has no streamed answer).
func figuresText(f apiv1.CanaryFigures, model bool) string {
	if f.Requests == 0 {
		return "no requests"
	}
	s := fmt.Sprintf("%d req, %s%% err, p99 %s", f.Requests, strconv.FormatFloat(f.ErrorRate*100, 'f', 2, 64), seconds(f.LatencyP99))
	if model {
		ttft := "-"
		if f.TTFTP99 > 0 {
			ttft = seconds(f.TTFTP99)
		}
		s += ", ttft p99 " + ttft
	}
	return s
}

// seconds formats a latency in seconds for a person: 850µs, 12.3ms, 1.25s.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	}
	return strconv.FormatInt(d.Microseconds(), 10) + "µs"
}

func setupAdopt(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	message := fs.String("m", "", "the change `MESSAGE` (default: \"adopt canary weights B/C of SERVICE\")")
	ifMatch := ifMatchFlag(fs)
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) != 1 {
			return usagef("give exactly one SERVICE")
		}
		match, err := ifMatch()
		if err != nil {
			return err
		}
		g, err := cc.c.Adopt(ctx, args[0], client.EditOptions{Message: *message, IfMatch: match})
		return cc.generation(g, err)
	}
}

func setupCache(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	prefix := fs.String("path-prefix", "", "purge only the entries whose request path starts with `P` (e.g. /img/)")
	message := fs.String("m", "", "why, recorded in the audit log")
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) != 2 || args[0] != "purge" {
			return usagef("give purge and exactly one SERVICE")
		}
		cc.service = args[1]
		p, err := cc.c.PurgeCache(ctx, args[1], *prefix, *message)
		if err != nil {
			return err
		}
		switch {
		case cc.printAnswer():
		case cc.output == outputName:
			fmt.Fprintf(cc.io.Out, "service/%s\n", clean(p.Service))
		default:
			under := ""
			if p.PathPrefix != "" {
				under = " under " + clean(p.PathPrefix)
			}
			fmt.Fprintf(cc.io.Out, "cache of %s purged%s: %d entries removed (generation %d)\n", clean(p.Service), under, p.Removed, p.Generation)
		}
		return nil
	}
}

// setupHold is the setup of pause (pause true) and resume.
func setupHold(pause bool) func(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	verb := "resume"
	if pause {
		verb = "pause"
	}
	return func(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
		message := fs.String("m", "", "why, recorded with the canary event (default: \""+verb+" canary of SERVICE\")")
		return func(ctx context.Context, cc *clientCall, args []string) error {
			if len(args) != 1 {
				return usagef("give exactly one SERVICE")
			}
			call := cc.c.ResumeCanary
			if pause {
				call = cc.c.PauseCanary
			}
			g, err := call(ctx, args[0], *message)
			if err != nil {
				return err
			}
			switch {
			case cc.printAnswer():
			case cc.output == outputName:
				fmt.Fprintf(cc.io.Out, "service/%s\n", clean(g.Service))
			default:
				fmt.Fprintf(cc.io.Out, "canary group %s: %s at %s (generation %d)\n", clean(g.Service), clean(g.State), weightPair(g.Weights), g.GenerationID)
			}
			return nil
		}
	}
}

// generation prints the generation a mutating verb created (or found
// unchanged), or returns err.
func (cc *clientCall) generation(g apiv1.Generation, err error) error {
	if err != nil {
		return err
	}
	switch {
	case cc.printAnswer():
	case cc.output == outputName:
		fmt.Fprintf(cc.io.Out, "generation/%d\n", g.ID)
	default:
		printGeneration(cc.io.Out, g)
	}
	return nil
}

// printAnswer prints the last answer as the API wrote it (-o json) or as
// YAML (-o yaml), and reports whether it did.
func (cc *clientCall) printAnswer() bool {
	switch cc.output {
	case outputJSON:
		cc.io.Out.Write(cc.answer)
		if !bytes.HasSuffix(cc.answer, []byte("\n")) {
			fmt.Fprintln(cc.io.Out)
		}
	case outputYAML:
		y, err := yaml.JSONToYAML(cc.answer)
		if err != nil {
			// Not JSON: shown as it came rather than lost.
			y = cc.answer
		}
		cc.io.Out.Write(y)
	default:
		return false
	}
	return true
}

// printGeneration prints the one-line summary of a new generation:
// "generation 7 created (rollback of 3) by alice: why", or of a change that
// stored nothing: "unchanged: generation 7 is active and already has this
// spec".
func printGeneration(w io.Writer, g apiv1.Generation) {
	if g.Unchanged {
		fmt.Fprintf(w, "unchanged: generation %d is active and already has this spec; nothing was stored\n", g.ID)
		return
	}
	action := clean(g.Action)
	if g.SourceID != nil {
		action += fmt.Sprintf(" of %d", *g.SourceID)
	}
	line := fmt.Sprintf("generation %d created (%s) by %s", g.ID, action, clean(g.Author))
	if g.Message != "" {
		line += ": " + clean(g.Message)
	}
	fmt.Fprintln(w, line)
}

// printDiff prints a diff or a dry run's impact: every service with its
// change, the share of keys that moves and the details, the canaries the
// publish starts afresh, then the upstreams that changed.
func printDiff(w io.Writer, d apiv1.Diff, wide bool) {
	side := func(id *int64, none string) string {
		if id == nil {
			return none
		}
		return "generation " + strconv.FormatInt(*id, 10)
	}
	fmt.Fprintf(w, "%s against %s\n", side(d.To, "the proposed spec"), side(d.From, "an empty configuration (no generation)"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tCHANGE\tMOVED\tDETAILS")
	decide, ruleChanges := false, 0
	for _, s := range d.Services {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", clean(s.Name), clean(s.Change), moved(s), clean(strings.Join(s.Details, "; ")))
		decide = decide || s.MatchesDecide
		ruleChanges += len(s.MatchChanges)
	}
	tw.Flush()
	if decide {
		fmt.Fprintln(w, `matches decide: the requests a match rule takes go where the rule says, whatever the weights; MOVED counts only the requests the weights decide ("of weighted"), and what share a rule change moves ("+ matches decide") depends on the traffic`)
	}
	if wide && ruleChanges > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "SERVICE\tMATCH RULE\tCHANGE\tDETAILS")
		for _, s := range d.Services {
			for _, c := range s.MatchChanges {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", clean(s.Name), clean(c.Rule), clean(c.Change), clean(strings.Join(c.Details, "; ")))
			}
		}
		tw.Flush()
	}
	if len(d.CanaryReset) > 0 {
		names := make([]string, len(d.CanaryReset))
		for i, n := range d.CanaryReset {
			names[i] = clean(n)
		}
		fmt.Fprintf(w, "canary reset: %s (started afresh at the configured weights; the weight in force, hold and any rollback are dropped)\n", strings.Join(names, ", "))
	}
	var changed []apiv1.UpstreamDiff
	for _, u := range d.Upstreams {
		if wide || u.Change != apiv1.ChangeUnchanged {
			changed = append(changed, u)
		}
	}
	if len(changed) == 0 {
		fmt.Fprintln(w, "upstreams: no changes")
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "UPSTREAM\tCHANGE\tDETAILS")
	for _, u := range changed {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", clean(u.Name), clean(u.Change), clean(strings.Join(u.Details, "; ")))
	}
	tw.Flush()
}

// printChangedServices prints service/NAME for each service d changes.
func printChangedServices(w io.Writer, d apiv1.Diff) {
	for _, sv := range d.Services {
		if sv.Change != apiv1.ChangeUnchanged {
			fmt.Fprintf(w, "service/%s\n", clean(sv.Name))
		}
	}
}

// moved is the MOVED column of a service in a diff: the share of keys
// that moves, "of weighted" when match rules take some requests (the share
// is of the others), "+ matches decide" when a rule changed, which moves
// requests by a share no weight tells.
func moved(s apiv1.ServiceDiff) string {
	switch {
	case len(s.MatchChanges) > 0:
		return percent(s.MovedShare) + " of weighted + matches decide"
	case s.MatchesDecide:
		return percent(s.MovedShare) + " of weighted"
	}
	return percent(s.MovedShare)
}

// percent formats a share of keys as a percentage with one decimal; a share
// too small to show is "<0.1%", so a move is never shown as none.
func percent(share float64) string {
	if share > 0 && share < 0.0005 {
		return "<0.1%"
	}
	return strconv.FormatFloat(share*100, 'f', 1, 64) + "%"
}

// clean makes text from the server safe for one line of a terminal: line
// breaks and tabs become spaces, other control characters "?".
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.IsControl(r):
			return '?'
		}
		return r
	}, s)
}

// newTotal is the total weight cc.service's split would have with
// cc.weights, by the active generation; -1 when it cannot be worked out.
func (cc *clientCall) newTotal(ctx context.Context) int {
	g, err := cc.c.Current(ctx)
	if err != nil {
		return -1
	}
	spec, err := config.Parse(g.Spec)
	if err != nil {
		return -1
	}
	svc, _ := spec.Service(cc.service)
	if svc == nil {
		return -1
	}
	total := 0
	for _, t := range svc.Targets() {
		if w, ok := cc.weights[t.Upstream]; ok {
			total += w
		} else {
			total += t.Weight
		}
	}
	return total
}

// reshuffleRefused reports whether p refuses a weights change because it
// changes the total weight (the API's "weights" field error).
func reshuffleRefused(p *apiv1.Problem) bool {
	for _, fe := range p.Errors {
		if fe.Path == "weights" && strings.HasPrefix(fe.Message, "total weight would change") {
			return true
		}
	}
	return false
}

// report prints why a call failed: a problem answer with every field error,
// or an unreachable API with what to do about it. With --json a problem
// answer is also printed to stdout as the API wrote it.
func (cc *clientCall) report(ctx context.Context, err error, timeout time.Duration) {
	w := cc.io.Err
	prefix := "dwara " + cc.verb + ": "
	if se, ok := errors.AsType[*specError](err); ok {
		if cc.output == outputJSON || cc.output == outputYAML {
			// The shape of the API's own 422, for scripts.
			p := apiv1.Problem{Type: "about:blank", Title: "Unprocessable Entity", Status: 422,
				Detail: se.Error() + "; nothing was sent", Errors: make([]apiv1.FieldError, len(se.errs))}
			for i, fe := range se.errs {
				p.Errors[i] = apiv1.FieldError{Path: fe.Path, Message: fe.Message}
			}
			cc.answer, _ = json.Marshal(p)
			cc.printAnswer()
		}
		fmt.Fprintln(w, prefix+se.Error()+"; nothing was sent")
		for _, fe := range se.errs {
			fmt.Fprintln(w, "  "+clean(fe.String()))
		}
		return
	}
	if p, ok := errors.AsType[*apiv1.Problem](err); ok {
		if len(cc.answer) > 0 && (cc.output == outputJSON || cc.output == outputYAML) {
			cc.printAnswer()
		}
		line := fmt.Sprintf("%d %s", p.Status, clean(p.Title))
		if p.Detail != "" {
			line += ": " + clean(p.Detail)
		}
		fmt.Fprintln(w, prefix+line)
		for _, fe := range p.Errors {
			fmt.Fprintln(w, "  "+clean(fe.String()))
		}
		switch p.Status {
		case 401:
			if cc.c.HasToken() {
				fmt.Fprintln(w, "hint: the token sent (from --token-file, $DWARA_ADMIN_TOKEN or the context's token-file) is not the server's admin token")
			} else {
				fmt.Fprintln(w, "hint: the API wants a token; give --token-file FILE, set $DWARA_ADMIN_TOKEN, or add a token-file to the context (dwara config set-context)")
			}
		case 412:
			fmt.Fprintln(w, "hint: another change was published first; see it with \"dwara history\" and \"dwara diff\", then retry")
		case 422:
			if cc.verb == "weights" && reshuffleRefused(p) {
				if cc.newTotal(ctx) == 0 {
					fmt.Fprintln(w, "hint: these weights leave the split no weight at all; give at least one target a positive weight")
				} else {
					fmt.Fprintln(w, "hint: keep the total, or add --allow-reshuffle to change it (every session may then move to another target)")
				}
			}
		}
		return
	}
	if cc.c == nil { // a local verb: no API was called
		fmt.Fprintf(w, "%s%v\n", prefix, err)
		return
	}
	base := cc.c.URL()
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		fmt.Fprintf(w, "%scannot reach the Dwara API at %s: connection refused\n", prefix, base)
		fmt.Fprintln(w, "hint: is \"dwara serve\" running? Start one with \"make run\", or point --api (or DWARA_API_URL) at it")
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		fmt.Fprintf(w, "%sno answer from the Dwara API at %s within %s\n", prefix, base, timeout)
	default:
		fmt.Fprintf(w, "%s%v\n", prefix, err)
	}
}
