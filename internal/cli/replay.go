package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/objwatch/objwatch/client/recording"
)

// replayCmd is `objwatch replay`.
type replayCmd struct {
	kubeconfig, context string
	speed               float64
	step                bool

	wrap func(http.RoundTripper) http.RoundTripper // tests
}

func newReplayCommand() *cobra.Command { return (&replayCmd{}).command() }

func (r *replayCmd) command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay FILE",
		Short: "Play a recording (objwatch record) into a server",
		Long: `replay reads a recording made by objwatch record (or informer.Record), checks
every line, and plays it into the server the kubeconfig reaches: each recorded object
is created, each change updates it by name, each deletion deletes it, in the recorded
order; a recorded relist (after a 410) writes what it changed. Objects are written
without their uid, resourceVersion, creationTimestamp, generation, managedFields,
ownerReferences and finalizers; missing namespaces are created.

--speed scales the recorded spacing between events: 1 (the default) keeps it, 10
plays ten times faster, 0 plays as fast as the server takes it. --step instead shows
each write and waits for Enter before doing it.

Each write is printed as it is done:

  +1.250s line 7 update v1/configmaps shop/settings`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&r.kubeconfig, "kubeconfig", "", "kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)")
	f.StringVar(&r.context, "context", "", "kubeconfig context (default: the current one)")
	f.Float64Var(&r.speed, "speed", 1, "scale the recorded spacing by this factor (0: no waiting)")
	f.BoolVar(&r.step, "step", false, "wait for Enter before each write")
	cmd.MarkFlagsMutuallyExclusive("speed", "step")
	return cmd
}

func (r *replayCmd) run(ctx context.Context, stdin io.Reader, stdout io.Writer, file string) error {
	if r.speed < 0 {
		return fmt.Errorf("--speed %v: want 0 or more", r.speed)
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	rec, err := recording.ReadAll(bufio.NewReader(f))
	f.Close()
	if err != nil {
		return fmt.Errorf("replay %s: %w", file, err)
	}
	rc, _, err := restClient(r.kubeconfig, r.context, r.wrap)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	opts := recording.ReplayOptions{Speed: r.speed}
	if r.step {
		opts.Speed = 0
		in := bufio.NewReader(stdin)
		opts.Before = func(ctx context.Context, it recording.Item) error {
			fmt.Fprintf(stdout, "next: line %d %s %s — Enter to write ", it.Line, it.Kind, it.Resource)
			if _, err := in.ReadString('\n'); err != nil {
				if errors.Is(err, io.EOF) {
					return errors.New("stopped: end of input")
				}
				return err
			}
			return ctx.Err()
		}
	}
	start := time.Now()
	opts.After = func(it recording.Item, action, key string) {
		fmt.Fprintf(stdout, "+%.3fs line %d %s %s %s\n", time.Since(start).Seconds(), it.Line, action, it.Resource, key)
	}
	st, err := recording.Replay(ctx, rc, rec, opts)
	fmt.Fprintf(stdout, "# %d creates, %d updates, %d deletes in %v\n", st.Creates, st.Updates, st.Deletes, time.Since(start).Round(time.Millisecond))
	return err
}
