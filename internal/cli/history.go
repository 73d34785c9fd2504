package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
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
		Short: "Show every stored revision of an object still in etcd's history, with diffs and authors",
		Long: `history asks an objwatch server for the stored revisions of one object (the
history subresource, GET .../NAME/history, which needs permission to get the
object) and prints them oldest first, each with the fields changed since the one
before and, when the server has an audit log, who made the change and how:

  rv=1203 2026-01-02T15:04:05Z alice create
  rv=1250 2026-01-02T15:09:12Z bob update
    ~ data.mode: slow → fast

Revisions etcd has compacted away are reported, not skipped silently:

  # revisions before 1190 were compacted; the oldest one kept is shown whole

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

// objectHistory is the server's answer (server/endpoints.ObjectHistory).
type objectHistory struct {
	Complete          bool  `json:"complete"`
	CompactedRevision int64 `json:"compactedRevision"`
	Items             []struct {
		ResourceVersion string         `json:"resourceVersion"`
		Object          map[string]any `json:"object"`
		Author          *struct {
			User             string    `json:"user"`
			ImpersonatedUser string    `json:"impersonatedUser"`
			Verb             string    `json:"verb"`
			Time             time.Time `json:"time"`
		} `json:"author"`
	} `json:"items"`
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
	var hist objectHistory
	if err := json.Unmarshal(b, &hist); err != nil {
		return fmt.Errorf("history of %s %s: %w", res, name, err)
	}
	p := &watchRun{watchCmd: &watchCmd{}, color: !h.noColor && isTerminal(out)}
	obj := name
	if ns != "" {
		obj = ns + "/" + name
	}
	fmt.Fprintf(out, "# %s %s: %s\n", res.GVR.Resource, obj, plural(len(hist.Items), "revision"))
	if !hist.Complete {
		switch {
		case hist.CompactedRevision > 0:
			fmt.Fprintf(out, "# revisions before %d were compacted; the oldest one kept is shown whole\n", hist.CompactedRevision)
		case hist.CompactedRevision < 0:
			fmt.Fprintln(out, "# older revisions were compacted; the oldest one kept is shown whole")
		default:
			fmt.Fprintln(out, "# older revisions are not shown; the oldest one shown is whole")
		}
	}
	var prev map[string]any
	for i, it := range hist.Items {
		header := "rv=" + it.ResourceVersion
		if a := it.Author; a != nil {
			who := a.User
			if a.ImpersonatedUser != "" {
				who += " as " + a.ImpersonatedUser
			}
			header += fmt.Sprintf(" %s %s %s", a.Time.UTC().Format(time.RFC3339), who, a.Verb)
		} else if i == 0 && hist.Complete {
			header += " created"
		}
		fmt.Fprintln(out, p.paint(ansiBold, header))
		switch {
		case i == 0 && !hist.Complete:
			for _, c := range change.Between(map[string]any{}, change.WithoutNoise(it.Object)).Changes() {
				fmt.Fprintln(out, p.changeLine(c))
			}
		case i > 0:
			for _, c := range change.Between(change.WithoutNoise(prev), change.WithoutNoise(it.Object)).Changes() {
				fmt.Fprintln(out, p.changeLine(c))
			}
		}
		prev = it.Object
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
