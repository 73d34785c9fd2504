package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/client"
)

// parseMoment reads a moment: an RFC 3339 time, or a duration ago (2h,
// 90m, 3d; Go's units plus d for days).
func parseMoment(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		var n float64
		if n, err = strconv.ParseFloat(days, 64); err == nil {
			d = time.Duration(n * float64(24*time.Hour))
		}
	}
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-12-04T09:30:00Z) or a duration ago (2h, 90m, 3d)", s)
	}
	return now.Add(-d), nil
}

// requireHistory fails plainly when the server keeps no history store
// (not objwatch, or objwatch serve --history=false): it would answer the
// present instead of the past asked for, or nothing.
func requireHistory(ctx context.Context, rc *client.REST, what string) error {
	b, err := rc.Raw(ctx, "/version")
	if err != nil {
		return fmt.Errorf("%s: reading the server's version: %w", what, err)
	}
	var v map[string]string
	if err := json.Unmarshal(b, &v); err != nil || v["history"] == "" {
		return fmt.Errorf("%s: this server keeps no history store (it is not objwatch, or runs with --history=false), so it cannot show the past; objwatch history shows what etcd itself still has", what)
	}
	return nil
}

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
	at, err := parseMoment(g.asOf, g.now())
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
	if err := requireHistory(ctx, rc, "--as-of"); err != nil {
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

// changeList is the server's answer (server/endpoints.ChangeList).
type changeList struct {
	FromResourceVersion string `json:"fromResourceVersion"`
	ToResourceVersion   string `json:"toResourceVersion"`
	Continue            string `json:"continue"`
	HistoryStartsLater  bool   `json:"historyStartsLater"`
	Items               []struct {
		Type            string          `json:"type"`
		Group           string          `json:"group"`
		Resource        string          `json:"resource"`
		Namespace       string          `json:"namespace"`
		Name            string          `json:"name"`
		ResourceVersion string          `json:"resourceVersion"`
		Time            time.Time       `json:"time"`
		Author          *historyAuthor  `json:"author"`
		InGap           bool            `json:"inGap"`
		Patch           json.RawMessage `json:"patch"`
	} `json:"items"`
}

func (c *changesCmd) run(ctx context.Context, out io.Writer, resource string) error {
	if c.since == "" {
		return errors.New("--since is required (e.g. --since 1h)")
	}
	now := c.now()
	since, err := parseMoment(c.since, now)
	if err != nil {
		return fmt.Errorf("--since %w", err)
	}
	q := url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}}
	if c.until != "" {
		until, err := parseMoment(c.until, now)
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
	if err := requireHistory(ctx, rc, "changes"); err != nil {
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
		var l changeList
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

func (c *changesCmd) printChange(out io.Writer, p *watchRun, typ, resource, group, ns, name, rv string, t time.Time, a *historyAuthor, inGap bool, patch json.RawMessage) {
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
		who = a.who()
	}
	header := fmt.Sprintf("rv=%s %s %s %s  %s", rv, t.UTC().Format(time.RFC3339), typ, obj, who)
	if inGap {
		header += " (deleted at some revision within a gap of the history)"
	}
	fmt.Fprintln(out, p.paint(ansiBold, header))
	if typ != "MODIFIED" {
		return
	}
	for _, line := range patchLines(patch) {
		fmt.Fprintln(out, line)
	}
}

// patchLines renders a change's JSON patch as one line per operation.
func patchLines(patch json.RawMessage) []string {
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if json.Unmarshal(patch, &ops) != nil {
		return nil
	}
	var out []string
	for _, op := range ops {
		path := strings.ReplaceAll(strings.TrimPrefix(op.Path, "/"), "/", ".")
		if strings.HasPrefix(path, "metadata.managedFields") || path == "metadata.resourceVersion" {
			continue
		}
		switch op.Op {
		case "remove":
			out = append(out, "    - "+path)
		default:
			v, _ := json.Marshal(op.Value)
			sign := "~"
			if op.Op == "add" {
				sign = "+"
			}
			out = append(out, fmt.Sprintf("    %s %s: %s", sign, path, v))
		}
	}
	return out
}
