package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dwara/dwara/client"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/httproute"
)

// setupExport is the export verb: the active generation's services as
// Gateway API HTTPRoutes on stdout (package httproute), and the upstreams
// they name, in Dwara's schema, to --upstreams FILE, which import takes
// back.
func setupExport(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	format := fs.String("format", "", "the output `FORMAT`: httproute (Gateway API HTTPRoutes, gateway.networking.k8s.io/v1)")
	upstreams := fs.String("upstreams", "", "also write the upstreams the routes name to `FILE` (import's --upstreams)")
	namespace := fs.String("namespace", "", "the routes' metadata.namespace `NS`")
	gateway := fs.String("gateway", "", "the `NAME` of the Gateway the routes attach to (spec.parentRefs)")
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if *format != "httproute" {
			return usagef("--format must be httproute, not %q", *format)
		}
		g, err := cc.c.Current(ctx)
		if err != nil {
			return err
		}
		spec, err := config.Parse(g.Spec)
		if err != nil {
			return fmt.Errorf("the active generation %d does not decode: %w", g.ID, err)
		}
		routes, ups, err := httproute.Export(spec, args, httproute.ExportOptions{Namespace: *namespace, Gateway: *gateway, JSON: cc.output == outputJSON})
		if err != nil {
			return err
		}
		if *upstreams != "" {
			if err := os.WriteFile(*upstreams, ups, 0o644); err != nil {
				return fmt.Errorf("--upstreams: %w", err)
			}
		} else {
			fmt.Fprintln(cc.io.Err, "hint: the upstreams (endpoints) are not in HTTPRoutes; give --upstreams FILE to keep them for dwara import")
		}
		if cc.output != outputJSON {
			fmt.Fprintf(cc.io.Out, "# HTTPRoutes of generation %d\n", g.ID)
		}
		_, err = cc.io.Out.Write(routes)
		return err
	}
}

// setupImport is the import verb: HTTPRoutes and the upstreams they name
// become a spec (package httproute), published as apply publishes one. A
// field Dwara cannot serve is refused before anything is sent, with every
// such field named.
func setupImport(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	file := fs.String("f", "", "the HTTPRoutes `FILE`, YAML or JSON, documents or a List (- reads stdin)")
	upstreams := fs.String("upstreams", "", "the upstreams `FILE`: \"upstreams: [{name, endpoints, ...}]\", one per Service the routes name")
	message := fs.String("m", "", "the change `MESSAGE` (default: \"import FILE\")")
	dryRun := fs.Bool("dry-run", false, "validate and show the impact without storing anything")
	ifMatch := ifMatchFlag(fs)
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) > 0 {
			return usagef("unexpected argument %q (the routes are given with -f FILE)", args[0])
		}
		if *file == "" || *upstreams == "" {
			return usagef("-f ROUTES and --upstreams FILE are required")
		}
		match, err := ifMatch()
		if err != nil {
			return err
		}
		routes, err := readInput(cc.io.In, *file)
		if err != nil {
			return err
		}
		ups, err := os.ReadFile(*upstreams)
		if err != nil {
			return fmt.Errorf("--upstreams: %w", err)
		}
		spec, err := httproute.Import(routes, ups)
		if ie, ok := errors.AsType[*httproute.Error](err); ok {
			se := &specError{file: specName(*file), what: "the HTTPRoutes"}
			for _, p := range ie.Problems {
				se.errs = append(se.errs, config.FieldError{Path: p.Route + ": " + p.Path, Message: p.Message})
			}
			return se
		}
		if v, ok := errors.AsType[*config.ValidationError](err); ok {
			return &specError{file: specName(*file), errs: v.Errors, what: "the spec made of the HTTPRoutes"}
		}
		if err != nil {
			return err
		}
		js, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		msg := *message
		if msg == "" {
			msg = "import " + filepath.Base(specName(*file))
		}
		return cc.publish(ctx, msg, js, client.CreateOptions{DryRun: *dryRun, IfMatch: match})
	}
}
