package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/gateway/config"
)

// ServiceList is what `dwara get services -o json` prints: the active
// generation's id and its services (all, or those named) as the spec has
// them.
type ServiceList struct {
	Generation int64             `json:"generation"`
	Services   []json.RawMessage `json:"services"`
}

func setupGet(*flag.FlagSet) func(context.Context, *clientCall, []string) error {
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) == 0 || !slices.Contains([]string{"services", "service", "svc"}, args[0]) {
			return usagef("give what to get: services [SERVICE...]")
		}
		names := args[1:]
		g, err := cc.c.Current(ctx)
		if err != nil {
			return err
		}
		spec, err := config.Parse(g.Spec)
		if err != nil {
			return fmt.Errorf("read the spec of generation %d: %w", g.ID, err)
		}
		var raw struct {
			Services []json.RawMessage `json:"services"`
		}
		if err := json.Unmarshal(g.Spec, &raw); err != nil {
			return fmt.Errorf("read the services of generation %d: %w", g.ID, err)
		}
		if len(raw.Services) != len(spec.Services) {
			return fmt.Errorf("read the services of generation %d: %d in the spec, %d decoded", g.ID, len(raw.Services), len(spec.Services))
		}
		list := ServiceList{Generation: g.ID, Services: []json.RawMessage{}}
		var svcs []*config.Service
		all := make([]string, len(spec.Services))
		for i := range spec.Services {
			all[i] = spec.Services[i].Name
		}
		for _, n := range names {
			if !slices.Contains(all, n) {
				msg := fmt.Sprintf("service %q is not in the active generation (%d)", n, g.ID)
				if near := config.Nearest(n, all); near != "" {
					msg += fmt.Sprintf("; did you mean %q?", near)
				}
				return fmt.Errorf("%s", msg)
			}
		}
		for i := range spec.Services {
			if len(names) == 0 || slices.Contains(names, spec.Services[i].Name) {
				svcs = append(svcs, &spec.Services[i])
				list.Services = append(list.Services, raw.Services[i])
			}
		}
		w := cc.io.Out
		switch cc.output {
		case outputJSON, outputYAML:
			js, err := json.MarshalIndent(list, "", "  ")
			if err != nil {
				return err
			}
			if cc.output == outputYAML {
				if js, err = yaml.JSONToYAML(js); err != nil {
					return err
				}
				_, err = w.Write(js)
				return err
			}
			_, err = fmt.Fprintf(w, "%s\n", js)
			return err
		case outputName:
			for _, s := range svcs {
				fmt.Fprintf(w, "service/%s\n", clean(s.Name))
			}
			return nil
		}
		printServices(w, g.ID, svcs, cc.output == outputWide)
		return nil
	}
}

// printServices prints one row per service (its route, where it sends its
// traffic and the names of its match rules), then, when any has match
// rules, one row per rule in the order they are checked: its name, its
// conditions and its target. wide adds the sticky cookie, the forced-branch
// header, the mirror and what manages the split.
func printServices(w io.Writer, generation int64, svcs []*config.Service, wide bool) {
	fmt.Fprintf(w, "generation %d\n", generation)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "SERVICE\tROUTE\tROUTING\tRULES\tSTICKY\tOVERRIDE\tMIRROR\tMANAGED BY")
	} else {
		fmt.Fprintln(tw, "SERVICE\tROUTE\tROUTING\tRULES")
	}
	rules := 0
	for _, s := range svcs {
		row := []string{clean(s.Name), clean(s.Host + s.BasePath), clean(routing(s)), "-"}
		if s.Split != nil && len(s.Split.Match) > 0 {
			names := make([]string, len(s.Split.Match))
			for i, r := range s.Split.Match {
				names[i] = clean(r.Name)
			}
			row[3] = strings.Join(names, ", ")
			rules += len(names)
		}
		if wide {
			sticky, override, mirror, managed := "-", "-", "-", "-"
			if s.Sticky != nil {
				sticky = clean(s.Sticky.Cookie) + " " + strconv.Itoa(s.Sticky.TTLSeconds) + "s"
			}
			if s.Override != nil {
				override = clean(s.Override.Header)
			}
			if s.Mirror != nil {
				mirror = clean(s.Mirror.Upstream) + " " + strconv.FormatFloat(s.Mirror.Percent, 'g', -1, 64) + "%"
			}
			if s.Split != nil && s.Split.ManagedBy != "" {
				managed = clean(s.Split.ManagedBy)
			}
			row = append(row, sticky, override, mirror, managed)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	if rules == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "match rules, checked in order before the weights (the first that matches decides the target):")
	fmt.Fprintln(tw, "SERVICE\t#\tRULE\tCONDITIONS\tTARGET")
	for _, s := range svcs {
		if s.Split == nil {
			continue
		}
		for i, r := range s.Split.Match {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", clean(s.Name), i+1, clean(r.Name), clean(strings.Join(r.Conditions(), " and ")), clean(r.Target))
		}
	}
	tw.Flush()
}

// routing says where a service sends the requests no match rule takes:
// "upstream web-stable", or "split api-stable 90 / api-canary 10" (with
// ", stable allocation" for a slot table).
func routing(s *config.Service) string {
	if s.Split == nil {
		return "upstream " + s.Upstream
	}
	parts := make([]string, len(s.Split.Targets))
	for i, t := range s.Split.Targets {
		parts[i] = t.Upstream + " " + strconv.Itoa(t.Weight)
	}
	out := "split " + strings.Join(parts, " / ")
	if s.Split.Stable() {
		out += ", stable allocation"
	}
	return out
}
