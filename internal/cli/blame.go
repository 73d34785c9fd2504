package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/explain"
)

// blameCmd is `objwatch blame`.
type blameCmd struct {
	target
	now func() time.Time
}

func newBlameCommand() *cobra.Command {
	b := &blameCmd{now: time.Now}
	cmd := &cobra.Command{
		Use:   "blame RESOURCE NAME",
		Short: "Show an object's YAML with each field's manager and, with an audit log, the user who last changed it",
		Long: `blame prints an object as YAML (without metadata.managedFields), each field's
line annotated with the field manager that owns it, the manager's operation and
when it wrote, as the object's metadata.managedFields record them:

  kubectl-create (Update 5m ago)     data:
  kubectl-create (Update 5m ago)       mode: slow
  kubectl-edit (Update 2m ago)         owner: ops

When the server serves the history subresource with authors (an objwatch
server with an audit log), each line also names the user whose write last
changed the field, found by diffing the object's stored revisions:

  alice via kubectl-edit (Update 2m ago)   owner: ops

Lines no manager owns are not annotated.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return b.run(cmd.Context(), cmd.OutOrStdout(), args[0], args[1])
		},
	}
	b.target.addFlags(cmd.Flags())
	return cmd
}

func (b *blameCmd) run(ctx context.Context, out io.Writer, resource, name string) error {
	rc, res, path, ns, err := b.object(ctx, resource, name)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	raw, err := rc.Raw(ctx, path)
	if err != nil {
		return fmt.Errorf("%s %s%s: %w", res, name, b.notFoundHint(err, ns), err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf("%s %s: %w", res, name, err)
	}
	hist, err := explain.FetchHistory(ctx, rc, path)
	if err != nil && !explain.NoHistory(err) {
		return fmt.Errorf("history of %s %s: %w", res, name, err)
	}
	lines, err := explain.Blame(obj, explain.HistoryAuthors(hist), b.now())
	if err != nil {
		return fmt.Errorf("%s %s: %w", res, name, err)
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l.Note))
	}
	for _, l := range lines {
		fmt.Fprintf(out, "%-*s   %s\n", width, l.Note, l.Text)
	}
	return nil
}

// notFoundHint names the namespace blame looked in when the object was
// not found there, and how it was chosen, so that a missing -n is plain.
func (b *blameCmd) notFoundHint(err error, ns string) string {
	switch {
	case ns == "" || !errors.Is(err, client.ErrNotFound):
		return ""
	case b.namespace != "":
		return fmt.Sprintf(" (in namespace %q)", ns)
	default:
		return fmt.Sprintf(" (in namespace %q, the context's or the default; choose one with -n)", ns)
	}
}
