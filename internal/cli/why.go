package cli

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/explain"
)

// whyCmd is `objwatch why`: what keeps an object that is being deleted.
type whyCmd struct {
	target
	now func() time.Time
}

func newWhyCommand() *cobra.Command {
	w := &whyCmd{now: time.Now}
	cmd := &cobra.Command{
		Use:   "why RESOURCE NAME",
		Short: "Explain what keeps an object that is being deleted",
		Long: `why explains why an object is still there after a DELETE, on any
Kubernetes-compatible server: which finalizers hold it, and for the finalizers
whose work is known, what that work still waits for:
  foregroundDeletion  the dependents that block it (ownerReferences with
                      blockOwnerDeletion), and what holds each of them
  orphan              the dependents whose reference to it is still to be removed
  kubernetes          (a namespace) the objects left in it, and their finalizers
  customresourcecleanup.apiextensions.k8s.io
                      (a CustomResourceDefinition) its objects left
Any other finalizer belongs to a controller, which removes it when its clean-up
is done. Dependents are found by listing every resource the server serves, so
this reads much more than kubectl get.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return w.run(cmd.Context(), cmd.OutOrStdout(), args[0], args[1])
		},
	}
	f := cmd.Flags()
	w.target.addFlags(f)
	return cmd
}

func (w *whyCmd) run(ctx context.Context, out io.Writer, resource, name string) error {
	rc, res, _, ns, err := w.object(ctx, resource, name)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	obj, err := client.Unstructured(rc, res).Get(ctx, ns, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return explain.Why(ctx, rc, res, obj, w.now(), out)
}
