package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
)

// setupConfig is the config verb: it reads and writes the client
// configuration file, never the API. set-context takes the values of the
// global flags that name an API (--api, --token-file, --cacert,
// --insecure-skip-tls-verify, --actor) for the context it sets.
func setupConfig(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	actor := fs.String("actor", "", "set-context: the `NAME` recorded as the author of the context's changes")
	return func(_ context.Context, cc *clientCall, args []string) error {
		if len(args) == 0 {
			return usagef("give a subcommand: view, get-contexts, current-context, use-context, set-context or delete-context")
		}
		g := cc.globals
		path := configPath(g.configFile, cc.io.Getenv)
		cfg, err := loadConfig(path)
		if err != nil {
			return err
		}
		sub, rest := args[0], args[1:]
		name := func() (string, error) {
			if len(rest) != 1 || rest[0] == "" {
				return "", usagef("config %s needs exactly one context NAME", sub)
			}
			return rest[0], nil
		}
		w := cc.io.Out
		switch sub {
		case "view":
			if len(rest) != 0 {
				return usagef("config view takes no argument")
			}
			cc.answer, err = json.Marshal(cfg)
			if err != nil {
				return err
			}
			if cc.output == outputText {
				cc.output = outputYAML
			}
			cc.printAnswer()
		case "get-contexts":
			if len(rest) != 0 {
				return usagef("config get-contexts takes no argument")
			}
			if cc.output == outputName {
				for _, n := range cfg.names() {
					fmt.Fprintf(w, "context/%s\n", n)
				}
				return nil
			}
			if cc.answer, err = json.Marshal(cfg.Contexts); err != nil {
				return err
			}
			if cc.printAnswer() {
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CURRENT\tNAME\tAPI\tTOKEN FILE\tCA")
			for _, n := range cfg.names() {
				c := cfg.Contexts[n]
				cur := ""
				if n == cfg.CurrentContext {
					cur = "*"
				}
				ca := c.CertificateAuthority
				if c.InsecureSkipTLSVerify {
					ca = "(not verified)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cur, clean(n), clean(c.API), clean(c.TokenFile), clean(ca))
			}
			tw.Flush()
		case "current-context":
			if len(rest) != 0 {
				return usagef("config current-context takes no argument")
			}
			if cfg.CurrentContext == "" {
				return fmt.Errorf("no current context in %s; set one with \"dwara config use-context NAME\"", path)
			}
			fmt.Fprintln(w, cfg.CurrentContext)
		case "use-context":
			n, err := name()
			if err != nil {
				return err
			}
			if _, ok := cfg.Contexts[n]; !ok {
				return usagef("%s", cfg.unknownContext(n, path))
			}
			cfg.CurrentContext = n
			if err := cfg.save(path); err != nil {
				return err
			}
			fmt.Fprintf(cc.io.Err, "switched to context %q\n", n)
		case "set-context":
			n, err := name()
			if err != nil {
				return err
			}
			c := cfg.Contexts[n]
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			for _, f := range []string{"context", "o", "output", "json", "timeout"} {
				if set[f] {
					return usagef("config set-context does not take %s", dashed(f))
				}
			}
			if set["api"] {
				c.API = g.api
			}
			if set["token-file"] {
				c.TokenFile = g.tokenFile
			}
			if set["cacert"] {
				c.CertificateAuthority = g.cacert
			}
			if set["insecure-skip-tls-verify"] {
				c.InsecureSkipTLSVerify = g.insecure
			}
			if set["actor"] {
				c.Actor = *actor
			}
			if c.API != "" && !strings.Contains(c.API, "://") {
				return usagef("--api must be a URL with its scheme (http:// or https://), not %q", c.API)
			}
			if cfg.Contexts == nil {
				cfg.Contexts = map[string]clientContext{}
			}
			_, existed := cfg.Contexts[n]
			cfg.Contexts[n] = c
			if cfg.CurrentContext == "" {
				cfg.CurrentContext = n
			}
			if err := cfg.save(path); err != nil {
				return err
			}
			verb := "created"
			if existed {
				verb = "modified"
			}
			fmt.Fprintf(cc.io.Err, "context %q %s in %s\n", n, verb, path)
		case "delete-context":
			n, err := name()
			if err != nil {
				return err
			}
			if _, ok := cfg.Contexts[n]; !ok {
				return usagef("%s", cfg.unknownContext(n, path))
			}
			delete(cfg.Contexts, n)
			if cfg.CurrentContext == n {
				cfg.CurrentContext = ""
			}
			if err := cfg.save(path); err != nil {
				return err
			}
			fmt.Fprintf(cc.io.Err, "context %q deleted from %s\n", n, path)
		default:
			return usagef("unknown subcommand %q of config; the subcommands: view, get-contexts, current-context, use-context, set-context, delete-context", sub)
		}
		return nil
	}
}
