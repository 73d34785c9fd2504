package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/internal/explain"
)

// getCmd is `objwatch get`.
type getCmd struct {
	target
	asOf          string
	allNamespaces bool
	selector      string
	output        string
	now           func() time.Time
}

func newGetCommand() *cobra.Command {
	g := &getCmd{now: time.Now}
	cmd := &cobra.Command{
		Use:   "get RESOURCE [NAME] --as-of TIME",
		Short: "Show objects as they were at a past moment (from the server's history store)",
		Long: `get shows one object, or the objects of a resource, as they were at a past
moment: an RFC 3339 time or a duration ago (--as-of 2h). An objwatch server with
a history store answers it (GET or LIST with asOf), authorized as a read now;
other servers cannot, and get says so.

  objwatch get configmaps app -n prod --as-of 2h
  objwatch get deployments -A --as-of 2026-12-04T09:30:00Z -l app=web`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 2 {
				name = args[1]
			}
			return g.run(cmd.Context(), cmd.OutOrStdout(), args[0], name)
		},
	}
	f := cmd.Flags()
	g.target.addFlags(f)
	f.StringVar(&g.asOf, "as-of", "", "the moment: an RFC 3339 time or a duration ago (2h, 90m, 3d) (required)")
	f.BoolVarP(&g.allNamespaces, "all-namespaces", "A", false, "every namespace")
	f.StringVarP(&g.selector, "selector", "l", "", "label selector")
	f.StringVarP(&g.output, "output", "o", "", "output format: table (default for lists), yaml (default for one object) or json")
	return cmd
}

func (g *getCmd) run(ctx context.Context, out io.Writer, resource, name string) error {
	if g.asOf == "" {
		return errors.New("--as-of is required (objwatch get shows the past; kubectl get shows the present)")
	}
	at, err := explain.ParseMoment(g.asOf, g.now())
	if err != nil {
		return fmt.Errorf("--as-of %w", err)
	}
	switch g.output {
	case "", "table", "yaml", "json":
	default:
		return fmt.Errorf("--output %q: want table, yaml or json", g.output)
	}
	rc, res, path, ns, err := g.object(ctx, resource, name)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	if err := explain.RequireHistory(ctx, rc, "--as-of"); err != nil {
		return err
	}
	q := url.Values{"asOf": {at.UTC().Format(time.RFC3339Nano)}}
	if name == "" {
		path = strings.TrimSuffix(path, "/")
		if g.allNamespaces && res.Namespaced {
			path = strings.Replace(path, "/namespaces/"+url.PathEscape(ns), "", 1)
		}
		if g.selector != "" {
			q.Set("labelSelector", g.selector)
		}
	}
	b, err := rc.RawQuery(ctx, path, q)
	if err != nil {
		where := ""
		if ns != "" && !g.allNamespaces {
			where = fmt.Sprintf(" in namespace %q", ns)
		}
		return fmt.Errorf("%s %s%s as of %s: %w", res.GVR.Resource, name, where, at.UTC().Format(time.RFC3339), err)
	}
	return printPast(out, b, name == "", g.output)
}

// printPast prints a GET's object or a LIST's items.
func printPast(out io.Writer, b []byte, list bool, output string) error {
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch {
	case output == "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case output == "yaml" || (!list && output == ""):
		y, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = out.Write(y)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tRESOURCEVERSION\tCREATED")
	items, _ := v["items"].([]any)
	for _, it := range items {
		md, _ := it.(map[string]any)["metadata"].(map[string]any)
		fmt.Fprintf(tw, "%v\t%v\t%v\t%v\n", orDash(md["namespace"]), md["name"], md["resourceVersion"], md["creationTimestamp"])
	}
	return tw.Flush()
}

func orDash(v any) any {
	if v == nil || v == "" {
		return "-"
	}
	return v
}

// changesCmd is `objwatch changes`.
type changesCmd struct {
	target
	since, until  string
	allNamespaces bool
	selector      string
	output        string
	noColor       bool
	now           func() time.Time
}

func newChangesCommand() *cobra.Command {
	c := &changesCmd{now: time.Now}
	cmd := &cobra.Command{
		Use:   "changes [RESOURCE] --since TIME",
		Short: "Show every object created, changed or deleted in a window of time, who did it, and the diffs",
		Long: `changes lists what changed in a namespace (or -A, everywhere) between --since and
--until (default now), oldest first, each change with its author and the fields
it changed; RESOURCE narrows it to one resource. Only resources you may list are
shown. An objwatch server with a history store answers it
(GET /apis/objwatch.io/v1/changes); other servers cannot, and changes says so.

  objwatch changes -n prod --since 1h
  rv=5120 2026-12-04T09:31:02Z MODIFIED deployments/web  alice patch (kubectl-edit, on server-1)
    ~ spec.replicas: 3 → 5`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resource := ""
			if len(args) == 1 {
				resource = args[0]
			}
			return c.run(cmd.Context(), cmd.OutOrStdout(), resource)
		},
	}
	f := cmd.Flags()
	c.target.addFlags(f)
	f.StringVar(&c.since, "since", "", "start of the window: an RFC 3339 time or a duration ago (1h, 90m, 3d) (required)")
	f.StringVar(&c.until, "until", "", "end of the window (default now)")
	f.BoolVarP(&c.allNamespaces, "all-namespaces", "A", false, "every namespace, and cluster-scoped objects")
	f.StringVarP(&c.selector, "selector", "l", "", "label selector (of the object before or after the change)")
	f.StringVarP(&c.output, "output", "o", "", "output format: text (default) or json (the server's ChangeList pages)")
	f.BoolVar(&c.noColor, "no-color", false, "never use colours")
	return cmd
}

func (c *changesCmd) run(ctx context.Context, out io.Writer, resource string) error {
	if c.since == "" {
		return errors.New("--since is required (e.g. --since 1h)")
	}
	now := c.now()
	since, err := explain.ParseMoment(c.since, now)
	if err != nil {
		return fmt.Errorf("--since %w", err)
	}
	q := url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}}
	if c.until != "" {
		until, err := explain.ParseMoment(c.until, now)
		if err != nil {
			return fmt.Errorf("--until %w", err)
		}
		q.Set("until", until.UTC().Format(time.RFC3339Nano))
	}
	switch c.output {
	case "", "text", "json":
	default:
		return fmt.Errorf("--output %q: want text or json", c.output)
	}
	rc, cfg, err := restClient(c.kubeconfig, c.context, nil)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	if err := explain.RequireHistory(ctx, rc, "changes"); err != nil {
		return err
	}
	if resource != "" {
		res, err := resolveResource(ctx, rc, resource)
		if err != nil {
			return err
		}
		name := res.GVR.Resource
		if res.GVR.Group != "" {
			name += "." + res.GVR.Group
		}
		q.Set("resource", name)
	}
	if !c.allNamespaces {
		ns := c.namespace
		if ns == "" {
			ns = cfg.Namespace
		}
		if ns == "" {
			ns = "default"
		}
		q.Set("namespace", ns)
	}
	if c.selector != "" {
		q.Set("labelSelector", c.selector)
	}
	p := &watchRun{watchCmd: &watchCmd{}, color: !c.noColor && isTerminal(out)}
	n := 0
	for {
		b, err := rc.RawQuery(ctx, "/apis/objwatch.io/v1/changes", q)
		if err != nil {
			return fmt.Errorf("changes: %w", err)
		}
		if c.output == "json" {
			fmt.Fprintf(out, "%s\n", strings.TrimSpace(string(b)))
		}
		var l explain.ChangeList
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("changes: %w", err)
		}
		if c.output != "json" {
			if l.HistoryStartsLater {
				fmt.Fprintf(out, "# the server's history starts at rv=%s, after --since: earlier changes are not retained\n", l.FromResourceVersion)
			}
			for _, it := range l.Items {
				c.printChange(out, p, it.Type, it.Resource, it.Group, it.Namespace, it.Name, it.ResourceVersion, it.Time, it.Author, it.InGap, it.Patch)
			}
		}
		n += len(l.Items)
		if l.Continue == "" {
			break
		}
		q.Del("since")
		q.Set("fromResourceVersion", l.Continue)
	}
	if c.output != "json" && n == 0 {
		fmt.Fprintln(out, "# no changes in the window")
	}
	return nil
}

func (c *changesCmd) printChange(out io.Writer, p *watchRun, typ, resource, group, ns, name, rv string, t time.Time, a *explain.Author, inGap bool, patch json.RawMessage) {
	obj := resource
	if group != "" {
		obj += "." + group
	}
	obj += "/" + name
	if ns != "" && c.allNamespaces {
		obj = ns + "/" + obj
	}
	who := "unknown author"
	if a != nil {
		who = a.Who()
	}
	header := fmt.Sprintf("rv=%s %s %s %s  %s", rv, t.UTC().Format(time.RFC3339), typ, obj, who)
	if inGap {
		header += " (deleted at some revision within a gap of the history)"
	}
	fmt.Fprintln(out, p.paint(ansiBold, header))
	if typ != "MODIFIED" {
		return
	}
	for _, line := range explain.PatchLines(patch) {
		fmt.Fprintln(out, line)
	}
}
