package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/explain"
)

// historyCmd is `objwatch history`.
type historyCmd struct {
	target
	output  string
	noColor bool
}

func newHistoryCommand() *cobra.Command {
	h := &historyCmd{}
	cmd := &cobra.Command{
		Use:   "history RESOURCE NAME",
		Short: "Show every revision of an object the server retains, with diffs and authors",
		Long: `history asks an objwatch server for the stored revisions of one object (the
history subresource, GET .../NAME/history, which needs permission to get the
object) and prints them oldest first, each with the fields changed since the one
before and who made the change and how:

  rv=1203 2026-01-02T15:04:05Z alice create (kubectl-create, on server-1)
  rv=1250 2026-01-02T15:09:12Z bob update (kubectl-edit, on server-2)
    ~ data.mode: slow → fast
  rv=1300 2026-01-02T16:00:00Z alice delete (on server-1) deleted

A server with a history store (objwatch serve's default) answers every revision
it retains (--history-retention, 7 days by default), past etcd's compaction, a
deleted object's and the earlier objects of the same name included. Without one
it answers what etcd still has, with authors only from its audit log. Revisions
it could not record or no longer has are reported, not skipped silently:

  # revisions 1190-1201 could not be recorded (etcd compacted them while the history store was not reading)

-o json prints the server's answer (kind ObjectHistory) as it is.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return h.run(cmd.Context(), cmd.OutOrStdout(), args[0], args[1])
		},
	}
	f := cmd.Flags()
	h.target.addFlags(f)
	f.StringVarP(&h.output, "output", "o", "", "output format: text (default) or json")
	f.BoolVar(&h.noColor, "no-color", false, "never use colours")
	return cmd
}

func (h *historyCmd) run(ctx context.Context, out io.Writer, resource, name string) error {
	switch h.output {
	case "", "text", "json":
	default:
		return fmt.Errorf("--output %q: want text or json", h.output)
	}
	rc, res, path, ns, err := h.object(ctx, resource, name)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	path += "/history"
	b, err := rc.Raw(ctx, path)
	if err != nil {
		return fmt.Errorf("history of %s %s: %w", res, name, err)
	}
	if h.output == "json" {
		fmt.Fprintf(out, "%s\n", strings.TrimSpace(string(b)))
		return nil
	}
	var hist explain.ObjectHistory
	if err := json.Unmarshal(b, &hist); err != nil {
		return fmt.Errorf("history of %s %s: %w", res, name, err)
	}
	p := &watchRun{watchCmd: &watchCmd{}, color: !h.noColor && isTerminal(out)}
	obj := name
	if ns != "" {
		obj = ns + "/" + name
	}
	fmt.Fprintf(out, "# %s %s: %s\n", res.GVR.Resource, obj, plural(len(hist.Items), "revision"))
	for _, n := range hist.Notes() {
		fmt.Fprintln(out, "# "+n)
	}
	for _, r := range hist.Revisions() {
		fmt.Fprintln(out, p.paint(ansiBold, r.Header))
		for _, c := range r.Changes {
			fmt.Fprintln(out, p.changeLine(c))
		}
	}
	return nil
}

// object connects to the server of the flags and resolves resource: it
// returns the client (the caller closes its idle connections), the
// resource, the URL path of the object name and its namespace (see
// objectPath).
func (t *target) object(ctx context.Context, resource, name string) (*client.REST, client.Resource, string, string, error) {
	rc, cfg, err := restClient(t.kubeconfig, t.context, nil)
	if err != nil {
		return nil, client.Resource{}, "", "", err
	}
	res, err := resolveResource(ctx, rc, resource)
	if err != nil {
		rc.CloseIdleConnections()
		return nil, client.Resource{}, "", "", err
	}
	path, ns := t.objectPath(cfg, res, name)
	return rc, res, path, ns, nil
}

// objectPath returns the URL path of the object name of res, in the
// namespace of the flags (else the kubeconfig context's, else default)
// when res is namespaced, and that namespace.
func (t *target) objectPath(cfg *client.Config, res client.Resource, name string) (path, ns string) {
	path = "/api/" + res.GVR.Version
	if res.GVR.Group != "" {
		path = "/apis/" + res.GVR.Group + "/" + res.GVR.Version
	}
	if res.Namespaced {
		ns = t.namespace
		if ns == "" {
			ns = cfg.Namespace
		}
		if ns == "" {
			ns = "default"
		}
		path += "/namespaces/" + url.PathEscape(ns)
	}
	return path + "/" + res.GVR.Resource + "/" + url.PathEscape(name), ns
}
