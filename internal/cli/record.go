package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/recording"
)

// recordCmd is `objwatch record`. Its fields are the flags plus hooks
// tests replace.
type recordCmd struct {
	target
	allNamespaces  bool
	selector       string
	output         string
	duration       time.Duration
	includeSecrets bool
	redact         []string

	wrap  func(http.RoundTripper) http.RoundTripper // tests cut connections
	ready func()                                    // tests: every initial list is written
}

func newRecordCommand() *cobra.Command { return (&recordCmd{}).command() }

func (r *recordCmd) command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "record RESOURCE... -o FILE",
		Short: "Record the objects of some resources and every change to them, for replay",
		Long: `record captures, from any Kubernetes-compatible server reached through a
kubeconfig, the current objects of each RESOURCE (a plural, singular or short name or a
kind, optionally qualified by group: configmaps, cm, deployments.apps) and every watch
event after that, with its arrival time, into FILE: a gzip-compressed, versioned file of
JSON lines (docs/RECORDING.md). After a disconnect the watch resumes; when the server
has forgotten where it was (410 Gone) the file says so and holds the relisted state.

Objects are recorded without metadata.managedFields (server-side apply's bookkeeping,
often a third of an object). It records until --duration has passed or it is interrupted (Ctrl-C), then closes the
file; a file that was not closed is refused by replay as truncated.

Secrets are left out unless --include-secrets. --redact PATH (a JSON Pointer such as
/data/password, or dotted: data.password; * matches any key) replaces every string at
or below PATH with REDACTED, in every object; repeat it for several paths.

  objwatch record configmaps deployments.apps -n shop -o incident.rec --duration 10m
  objwatch replay incident.rec --speed 10`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return r.run(cmd.Context(), cmd.ErrOrStderr(), args)
		},
	}
	f := cmd.Flags()
	r.target.addFlags(f)
	f.BoolVarP(&r.allNamespaces, "all-namespaces", "A", false, "record all namespaces")
	f.StringVarP(&r.selector, "selector", "l", "", "label selector")
	f.StringVarP(&r.output, "output", "o", "", "the recording file to write (required)")
	f.DurationVar(&r.duration, "duration", 0, "stop after this long (default: until interrupted)")
	f.BoolVar(&r.includeSecrets, "include-secrets", false, "record Secrets too (left out by default)")
	f.StringArrayVar(&r.redact, "redact", nil, "replace the values at this path with REDACTED (repeatable)")
	cmd.MarkFlagsMutuallyExclusive("namespace", "all-namespaces")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

func (r *recordCmd) run(ctx context.Context, stderr io.Writer, args []string) error {
	rc, cfg, err := restClient(r.kubeconfig, r.context, r.wrap)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	var clients []*client.Resource
	h := recording.Header{Server: cfg.Host, LabelSelector: r.selector}
	ns := ""
	if !r.allNamespaces {
		ns = r.namespace
		if ns == "" {
			ns = cfg.Namespace
		}
		if ns == "" {
			ns = "default"
		}
		h.Namespace = ns
	}
	for _, arg := range args {
		res, err := resolveResource(ctx, rc, arg)
		if err != nil {
			return err
		}
		if res.GVR.Group == "" && res.GVR.Resource == "secrets" && !r.includeSecrets {
			return errors.New("secrets are left out of recordings unless --include-secrets")
		}
		clients = append(clients, &res)
		h.Resources = append(h.Resources, recording.ResourceName(res.GVR))
	}
	f, err := os.Create(r.output)
	if err != nil {
		return fmt.Errorf("recording: %w", err)
	}
	defer f.Close()
	w, err := recording.NewWriter(f, h, recording.Options{IncludeSecrets: r.includeSecrets, Redact: r.redact})
	if err != nil {
		return err
	}
	if r.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.duration)
		defer cancel()
	}
	start := time.Now()
	err = r.capture(ctx, rc, w, clients, ns, stderr)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("recording: %w", cerr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "# recorded %d items in %v to %s", w.Items(), time.Since(start).Round(time.Millisecond), r.output)
	if n := w.Skipped(); n > 0 {
		fmt.Fprintf(stderr, " (%d Secrets left out)", n)
	}
	fmt.Fprintln(stderr)
	return nil
}

// capture runs one recording.Capture per resource until ctx ends, flushing
// the file every second.
func (r *recordCmd) capture(ctx context.Context, rc *client.REST, w *recording.Writer, resources []*client.Resource, ns string, stderr io.Writer) error {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
		pending = len(resources)
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, res := range resources {
		opts := recording.CaptureOptions{LabelSelector: r.selector}
		if res.Namespaced {
			opts.Namespace = ns
		}
		opts.Failed = func(err error) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(stderr, "# %s: %v; retrying\n", res, err)
		}
		var once sync.Once
		opts.Synced = func() {
			once.Do(func() {
				mu.Lock()
				defer mu.Unlock()
				if pending--; pending == 0 {
					fmt.Fprintf(stderr, "# recording %d resources to %s\n", len(resources), r.output)
					if r.ready != nil {
						r.ready()
					}
				}
			})
		}
		wg.Go(func() {
			c := client.NewUnstructured(rc, *res).WithoutManagedFields()
			if err := recording.Capture(ctx, c, w, opts); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			_ = w.Flush()
		}
	}
	wg.Wait()
	return first
}
