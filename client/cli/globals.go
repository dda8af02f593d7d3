package cli

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/dwara/dwara/client"
)

// globals are the flags every client verb takes, before or after the verb
// ("dwara --context prod history" and "dwara history --context prod").
type globals struct {
	api, context, configFile, tokenFile, cacert, actor string
	insecure, insecureSet                              bool
	output                                             string
	timeout                                            time.Duration
}

// Output formats of -o.
const (
	outputText = ""     // the summary or table
	outputJSON = "json" // the API's answer as it wrote it
	outputYAML = "yaml" // the same as YAML
	outputWide = "wide" // the table with more columns
	outputName = "name" // kind/name per line, for scripts
)

// globalFlags are the names of the global flags that take a value, and
// globalBools those that take none: what hoistVerb knows of a command
// line before its verb.
var (
	globalFlags = []string{"api", "context", "config-file", "token-file", "cacert", "timeout", "o", "output", "actor"}
	globalBools = []string{"json", "insecure-skip-tls-verify"}
)

// register adds the global flags to fs (--actor only to a mutating verb).
func (g *globals) register(fs *flag.FlagSet, mutating bool) {
	fs.StringVar(&g.api, "api", "", "base `URL` of the API (default $DWARA_API_URL, else the context's, else "+client.DefaultURL+")")
	fs.StringVar(&g.context, "context", "", "the `NAME` of the context of the configuration file to use (default: its current-context)")
	fs.StringVar(&g.configFile, "config-file", "", "the client configuration `FILE` (default $DWARA_CONFIG, else ~/.config/dwara/config.yaml)")
	fs.StringVar(&g.tokenFile, "token-file", "", "read the bearer token from `FILE` (default $DWARA_ADMIN_TOKEN, else the context's token-file)")
	fs.StringVar(&g.cacert, "cacert", "", "verify the API's TLS certificate with the CA certificates in PEM `FILE`")
	fs.Func("insecure-skip-tls-verify", "do not verify the API's TLS certificate (testing only)", func(v string) error {
		switch v {
		case "true", "":
			g.insecure = true
		case "false":
			g.insecure = false
		default:
			return fmt.Errorf("want true or false, not %q", v)
		}
		g.insecureSet = true
		return nil
	})
	setBool(fs, "insecure-skip-tls-verify")
	fs.StringVar(&g.output, "o", "", "output `FORMAT`: json, yaml, wide or name (default: a summary)")
	fs.StringVar(&g.output, "output", "", "the same as -o")
	fs.Func("json", "the same as -o json", func(string) error { g.output = outputJSON; return nil })
	setBool(fs, "json")
	fs.DurationVar(&g.timeout, "timeout", client.DefaultTimeout, "give up on the API after this long")
	if mutating {
		fs.StringVar(&g.actor, "actor", "", "the `NAME` of who makes the change, recorded as its author (default: the context's, else $USER)")
	}
}

// boolFlag makes a flag.Func flag take no value, as a bool flag does.
type boolFlag struct{ flag.Value }

func (boolFlag) IsBoolFlag() bool { return true }

// setBool makes the Func flag name of fs a boolean one ("--json", not
// "--json=x").
func setBool(fs *flag.FlagSet, name string) {
	f := fs.Lookup(name)
	f.Value = boolFlag{f.Value}
}

// checkOutput checks the -o format against the ones verb prints.
func (g *globals) checkOutput(verb string, formats []string) error {
	if g.output == outputText || slices.Contains(formats, g.output) {
		return nil
	}
	if len(formats) == 0 {
		return usagef("--output: %s prints no other format than its summary", verb)
	}
	return usagef("--output must be one of %s for %s, not %q", strings.Join(formats, ", "), verb, g.output)
}

// StartsWithGlobalFlag reports whether args start with a global flag of
// the client verbs ("dwara --context prod history").
func StartsWithGlobalFlag(args []string) bool {
	if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
		return false
	}
	name, _, _ := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
	return slices.Contains(globalFlags, name) || slices.Contains(globalBools, name)
}

// hoistVerb moves the verb of a command line that starts with global flags
// to the front ("--api URL history --limit 3" becomes "history --api URL
// --limit 3"), so the verb's flag set parses them all. A line that starts
// with its verb is returned as it is.
func hoistVerb(args []string) ([]string, error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-" || !strings.HasPrefix(a, "-") {
			out := make([]string, 0, len(args))
			out = append(out, a)
			out = append(out, args[:i]...)
			return append(out, args[i+1:]...), nil
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case slices.Contains(globalFlags, name):
			if !hasValue {
				i++ // the value is the next argument
			}
		case slices.Contains(globalBools, name):
		default:
			return nil, usagef("unknown flag %s before the command; the flags allowed there: %s", dashed(name), dashedList(append(slices.Clone(globalFlags), globalBools...)))
		}
	}
	return nil, usagef("no command after the flags")
}

// dashed is how a flag is written in dwara's messages: --name, or -n for a
// one-letter name.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func dashedList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = dashed(n)
	}
	return strings.Join(out, ", ")
}

// flagInMessage finds the flags the flag package names with one dash in
// its errors ("flag provided but not defined: -actor").
var flagInMessage = regexp.MustCompile(`(^|[\s:])-([A-Za-z][A-Za-z0-9-]+)`)

// FlagError rewrites an error of the flag package in dwara's style: long
// flags with two dashes, as the usage text writes them.
func FlagError(err error) string {
	return flagInMessage.ReplaceAllString(err.Error(), "$1--$2")
}
