package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Command is one command of the dwara command line, for shell completion:
// its name, its flags (as typed: "--api", "-m") and whether its first
// argument is a service name.
type Command struct {
	Name  string
	Flags []string
	// FlagsWithValue are the flags of Flags that take a value.
	FlagsWithValue []string
	TakesService   bool
}

// serviceVerbs are the client verbs whose first argument is a SERVICE.
var serviceVerbs = []string{"flip", "weights", "kill", "canary", "adopt", "pause", "resume", "probe"}

// Commands returns the client verbs as Commands, sorted by name.
func Commands() []Command {
	var out []Command
	for _, name := range Verbs() {
		v := clientVerbs[name]
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		(&globals{}).register(fs, v.mutating)
		v.setup(fs)
		out = append(out, CommandOf(name, fs, slices.Contains(serviceVerbs, name)))
	}
	return out
}

// CommandOf describes the command name with the flags of fs.
func CommandOf(name string, fs *flag.FlagSet, takesService bool) Command {
	c := Command{Name: name, TakesService: takesService}
	fs.VisitAll(func(f *flag.Flag) {
		d := dashed(f.Name)
		c.Flags = append(c.Flags, d)
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
			c.FlagsWithValue = append(c.FlagsWithValue, d)
		}
	})
	return c
}

// fileFlags are the flags whose value is a file name.
var fileFlags = []string{"-f", "--config", "--config-file", "--token-file", "--cacert", "--admin-token-file",
	"--control-plane-token-file", "--tls-cert", "--tls-key", "--state-dir"}

// WriteCompletion writes the completion script of shell (bash, zsh or
// fish) for the commands cmds: command names, each command's flags, file
// names after a flag that takes a file, the contexts of the configuration
// file after --context, and the active generation's services (asked of the
// API as the script runs, through "dwara __services") where a SERVICE goes.
func WriteCompletion(w io.Writer, shell string, cmds []Command) error {
	switch shell {
	case "bash":
		writeBash(w, cmds)
	case "zsh":
		fmt.Fprint(w, "#compdef dwara\n# zsh completion for dwara: source it, or put it in a directory of $fpath as _dwara.\nautoload -U +X bashcompinit && bashcompinit\n")
		writeBash(w, cmds)
	case "fish":
		writeFish(w, cmds)
	default:
		return usagef("completion needs a shell: bash, zsh or fish, not %q", shell)
	}
	return nil
}

func names(cmds []Command) string {
	var n []string
	for _, c := range cmds {
		n = append(n, c.Name)
	}
	return strings.Join(n, " ")
}

func writeBash(w io.Writer, cmds []Command) {
	var valued []string
	for _, c := range cmds {
		for _, f := range c.FlagsWithValue {
			if !slices.Contains(valued, f) {
				valued = append(valued, f)
			}
		}
	}
	slices.Sort(valued)
	fmt.Fprintf(w, `# bash completion for dwara (dwara completion bash); source it from ~/.bashrc.
_dwara() {
	local cur prev verb i
	cur="${COMP_WORDS[COMP_CWORD]}"
	prev="${COMP_WORDS[COMP_CWORD-1]}"
	verb=""
	for ((i = 1; i < COMP_CWORD; i++)); do
		case "${COMP_WORDS[i]}" in
		%s) ((i++)) ;;
		-*) ;;
		*) verb="${COMP_WORDS[i]}"; break ;;
		esac
	done
	case "$prev" in
	--context)
		COMPREPLY=($(compgen -W "$(dwara config get-contexts -o name 2>/dev/null | sed 's|^context/||')" -- "$cur"))
		return ;;
	%s)
		COMPREPLY=($(compgen -f -- "$cur"))
		return ;;
	esac
	if [[ -z "$verb" ]]; then
		COMPREPLY=($(compgen -W "%s" -- "$cur"))
		return
	fi
	local flags=""
	case "$verb" in
`, strings.Join(valued, "|"), strings.Join(fileFlags, "|"), names(cmds))
	for _, c := range cmds {
		fmt.Fprintf(w, "\t%s) flags=%q ;;\n", c.Name, strings.Join(c.Flags, " "))
	}
	var svc []string
	for _, c := range cmds {
		if c.TakesService {
			svc = append(svc, c.Name)
		}
	}
	fmt.Fprintf(w, `	esac
	if [[ "$cur" == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
		return
	fi
	[[ "$prev" == "$verb" ]] || return 0
	case "$verb" in
	%s) COMPREPLY=($(compgen -W "$(dwara __services 2>/dev/null)" -- "$cur")) ;;
	completion) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")) ;;
	config) COMPREPLY=($(compgen -W "view get-contexts current-context use-context set-context delete-context" -- "$cur")) ;;
	esac
}
complete -F _dwara dwara
`, strings.Join(svc, "|"))
}

func writeFish(w io.Writer, cmds []Command) {
	fmt.Fprintf(w, "# fish completion for dwara (dwara completion fish > ~/.config/fish/completions/dwara.fish)\ncomplete -c dwara -f\n")
	fmt.Fprintf(w, "complete -c dwara -n __fish_use_subcommand -a %q\n", names(cmds))
	for _, c := range cmds {
		for _, f := range c.Flags {
			opt := "-l " + strings.TrimPrefix(f, "--")
			if !strings.HasPrefix(f, "--") {
				opt = "-s " + strings.TrimPrefix(f, "-")
			}
			if slices.Contains(c.FlagsWithValue, f) {
				opt += " -r"
				if slices.Contains(fileFlags, f) {
					opt += " -F"
				}
			}
			fmt.Fprintf(w, "complete -c dwara -n '__fish_seen_subcommand_from %s' %s\n", c.Name, opt)
		}
		if c.TakesService {
			fmt.Fprintf(w, "complete -c dwara -n '__fish_seen_subcommand_from %s' -a '(dwara __services 2>/dev/null)'\n", c.Name)
		}
	}
	fmt.Fprint(w, "complete -c dwara -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	fmt.Fprint(w, "complete -c dwara -n '__fish_seen_subcommand_from config' -a 'view get-contexts current-context use-context set-context delete-context'\n")
	fmt.Fprint(w, "complete -c dwara -l context -r -a '(dwara config get-contexts -o name 2>/dev/null | string replace context/ \"\")'\n")
}

// hiddenVerbs are client verbs for the completion scripts, not listed in
// the usage text.
var hiddenVerbs = map[string]clientVerb{
	"__services": {synopsis: "", summary: "Print the active generation's service names, one per line.", setup: setupServices},
}

// lookupVerb returns the client verb called name, hidden ones included.
func lookupVerb(name string) (clientVerb, bool) {
	if v, ok := clientVerbs[name]; ok {
		return v, true
	}
	v, ok := hiddenVerbs[name]
	return v, ok
}

// setupServices is the hidden verb the completion scripts call: the
// active generation's service names, one per line.
func setupServices(*flag.FlagSet) func(context.Context, *clientCall, []string) error {
	return func(ctx context.Context, cc *clientCall, _ []string) error {
		g, err := cc.c.Current(ctx)
		if err != nil {
			return err
		}
		var spec struct {
			Services []struct {
				Name string `json:"name"`
			} `json:"services"`
		}
		if err := json.Unmarshal(g.Spec, &spec); err != nil {
			return err
		}
		for _, s := range spec.Services {
			fmt.Fprintln(cc.io.Out, clean(s.Name))
		}
		return nil
	}
}
