package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/explain"
)

// watchCmd is `objwatch watch`. Its fields are the flags plus hooks tests
// replace.
type watchCmd struct {
	target
	allNamespaces     bool
	selector          string
	fields            []string
	diff              bool
	output            string
	noColor           bool
	showManagedFields bool

	now  func() time.Time                          // event times
	wrap func(http.RoundTripper) http.RoundTripper // tests cut connections
	// minBackoff and maxBackoff bound the delay between failed watches.
	minBackoff, maxBackoff time.Duration
}

func newWatchCommand() *cobra.Command {
	return (&watchCmd{now: time.Now, minBackoff: 500 * time.Millisecond, maxBackoff: 30 * time.Second}).command()
}

func (w *watchCmd) command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch RESOURCE [NAME]",
		Short: "Show each change to objects as it happens, with a diff",
		Long: `watch follows the objects of one resource (a plural, singular or short name or
a kind, optionally qualified by group: configmaps, cm, deployments.apps) on any
Kubernetes-compatible server reached through a kubeconfig, and prints each change.
It starts from the current state, printing nothing for objects that already exist.

Text output is one header line per event, with the time it was received, its type,
the object and its resourceVersion:

  12:04:05 MODIFIED default/w1 rv=1234

With --diff a MODIFIED header is followed by the changed fields, one per line
(metadata.resourceVersion and metadata.managedFields are left out):

    ~ spec.size: 3 → 4
    + metadata.labels.app: web
    - spec.color: red

(+ added, - removed, ~ replaced, > a list item moved). Colours (green, red,
yellow) are used when stdout is a terminal, unless --no-color. Lines starting with
# are notes: the start of the watch, a watch that failed and is resumed, and a
relist after the server forgot the watch's resourceVersion (410 Gone), such as

  # resourceVersion 1234 expired (410 Gone); relisted 12 objects, 1 change

after which the changes the relist found are printed as events.

-o json prints one JSON object per event and line instead:

  {"type":"MODIFIED","namespace":"default","name":"w1","resourceVersion":"1234",
   "time":"2006-01-02T15:04:05.000Z","changes":[{"path":"spec.size","op":"replace","old":3,"new":4}],
   "patch":[{"op":"replace","path":"/spec/size","value":4}]}

with changes and patch (RFC 6902, JSON-pointer paths, as in the audit records) only
for MODIFIED; notes then go to stderr.

Updates that change nothing but metadata.managedFields (a manager taking
shared ownership of a value, a new time stamp) are not shown, and the objects
are read without managedFields where the server can leave them out;
--show-managed-fields shows them, and their managedFields changes.

--fields PATHS shows only updates that changed one of the paths (patterns with
wildcards: spec.replicas, metadata.labels.*, spec.containers[*].image); other
updates are skipped silently, ADDED and DELETED are always shown. With --diff
only the matching fields are listed. A server that offers field masks (objwatch)
is asked not to send the other updates at all (a mask of each pattern's part
before its first wildcard: /spec/replicas, /metadata/labels, /spec/containers).

After a disconnect the watch resumes from the last resourceVersion seen, so no
change is missed or shown twice.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return w.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args)
		},
	}
	f := cmd.Flags()
	w.target.addFlags(f)
	f.BoolVarP(&w.allNamespaces, "all-namespaces", "A", false, "watch all namespaces")
	f.StringVarP(&w.selector, "selector", "l", "", "label selector")
	f.StringSliceVar(&w.fields, "fields", nil, "show only updates that changed one of these paths (comma-separated patterns)")
	f.BoolVar(&w.diff, "diff", false, "print the changed fields of each update")
	f.StringVarP(&w.output, "output", "o", "", "output format: text (default) or json")
	f.BoolVar(&w.noColor, "no-color", false, "never use colours")
	f.BoolVar(&w.showManagedFields, "show-managed-fields", false, "show updates of metadata.managedFields and their changes (default: ignored)")
	cmd.MarkFlagsMutuallyExclusive("namespace", "all-namespaces")
	return cmd
}

// watchRun is the state of one run; used by run's goroutine only.
type watchRun struct {
	*watchCmd
	out, notes io.Writer
	color      bool
	filter     *change.Filter
	res        client.Resource
	c          *client.Client[*unstructured.Unstructured]
	ns         string
	opts       metav1.ListOptions
	cache      map[string]*unstructured.Unstructured // by namespace/name
	rv         string                                // where the next watch starts
}

func (w *watchCmd) run(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	switch w.output {
	case "", "text", "json":
	default:
		return fmt.Errorf("--output %q: want text or json", w.output)
	}
	r := &watchRun{watchCmd: w, out: stdout, notes: stdout, cache: map[string]*unstructured.Unstructured{}}
	if w.output == "json" {
		r.notes = stderr
	}
	r.color = !w.noColor && w.output != "json" && isTerminal(stdout)
	if len(w.fields) > 0 {
		f, err := change.NewFilter(w.fields...)
		if err != nil {
			return fmt.Errorf("--fields: %w", err)
		}
		r.filter = f
	}
	rc, cfg, err := restClient(w.kubeconfig, w.context, w.wrap)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	if r.res, err = resolveResource(ctx, rc, args[0]); err != nil {
		return err
	}
	r.c = client.Unstructured(rc, r.res)
	if !w.showManagedFields {
		r.c = r.c.WithoutManagedFields()
	}
	if err := r.serverMask(ctx, rc); err != nil {
		return err
	}
	if r.res.Namespaced && !w.allNamespaces {
		r.ns = w.namespace
		if r.ns == "" {
			r.ns = cfg.Namespace
		}
		if r.ns == "" {
			r.ns = "default"
		}
	}
	r.opts.LabelSelector = w.selector
	if len(args) == 2 {
		r.opts.FieldSelector = "metadata.name=" + args[1]
	}
	err = r.loop(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// serverMask makes the watch ask the server for a field mask covering
// --fields, if the server offers masks and the patterns have pointers
// (each pattern's prefix before its first wildcard): the server then does
// not send the updates the filter would skip, and the filter still picks
// the exact fields. Otherwise every update is read and filtered here.
func (r *watchRun) serverMask(ctx context.Context, rc *client.REST) error {
	if r.filter == nil {
		return nil
	}
	ptrs, ok := r.filter.MaskPointers()
	if !ok {
		return nil
	}
	ext, err := rc.WatchExtensions(ctx)
	if err != nil {
		return fmt.Errorf("--fields: %w", err)
	}
	if ext.Has(client.ExtFieldMask) {
		r.c = r.c.WithWatchParams(client.WatchParams{FieldMask: ptrs})
	}
	return nil
}

// loop lists, then watches, resuming after disconnects and relisting after
// 410 Gone, until ctx ends.
func (r *watchRun) loop(ctx context.Context) error {
	items, rv, err := r.list(ctx)
	if err != nil {
		return err
	}
	for _, obj := range items {
		r.cache[keyOf(obj)] = obj
	}
	r.rv = rv
	r.note("watching %s%s: %s%s", r.what(), r.where(), plural(len(items), "object"), r.missingNamespace(ctx, len(items)))
	backoff := r.minBackoff
	for {
		start := time.Now()
		progress, err := r.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if progress {
			backoff = r.minBackoff
		}
		switch {
		case errors.Is(err, client.ErrGone):
			if err := r.relist(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				r.note("relist failed: %v; retrying", err)
				break
			}
			continue
		case errors.Is(err, io.EOF) && time.Since(start) > time.Second:
			continue // the server ended the watch at its timeout
		case errors.Is(err, client.ErrForbidden), errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrNotFound):
			return fmt.Errorf("watch %s: %w", r.res, err)
		case err != nil && !errors.Is(err, io.EOF):
			r.note("watch interrupted: %v; resuming from rv=%s", err, r.rv)
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, r.maxBackoff)
	}
}

// watch watches from r.rv until the watch fails, reporting whether it read
// anything.
func (r *watchRun) watch(ctx context.Context) (progress bool, err error) {
	opts := r.opts
	opts.ResourceVersion = r.rv
	opts.AllowWatchBookmarks = true
	wt, err := r.c.Watch(ctx, r.ns, opts)
	if err != nil {
		return false, err
	}
	defer wt.Stop()
	for {
		ev, err := wt.Next()
		if err != nil {
			return progress, err
		}
		progress = true
		obj := ev.Object
		switch ev.Type {
		case client.Bookmark:
		case client.Added, client.Modified:
			old := r.cache[keyOf(obj)]
			r.cache[keyOf(obj)] = obj
			if old != nil && old.GetUID() == obj.GetUID() {
				r.modified(old, obj)
			} else {
				if old != nil {
					r.event(client.Deleted, old, nil, nil)
				}
				r.event(client.Added, obj, nil, nil)
			}
		case client.Deleted:
			delete(r.cache, keyOf(obj))
			r.event(client.Deleted, obj, nil, nil)
		}
		r.rv = obj.GetResourceVersion()
	}
}

// relist lists again after the server forgot r.rv, and prints the
// differences with the cache as events, after a one-line explanation.
func (r *watchRun) relist(ctx context.Context) error {
	expired := r.rv
	items, rv, err := r.list(ctx)
	if err != nil {
		return err
	}
	var evs []explain.Relisted
	for _, e := range explain.RelistChanges(r.cache, items) {
		if e.Type != client.Modified || !r.between(e.Old, e.Obj).Empty() {
			evs = append(evs, e)
		}
	}
	r.note("%s", relistNote(expired, len(items), len(evs)))
	r.rv = rv
	for _, e := range evs {
		if e.Type == client.Modified {
			r.modified(e.Old, e.Obj)
		} else {
			r.event(e.Type, e.Obj, nil, nil)
		}
	}
	return nil
}

// list reads every matching object, a page at a time, and the list's
// resourceVersion.
func (r *watchRun) list(ctx context.Context) ([]*unstructured.Unstructured, string, error) {
	return explain.ListAll(ctx, r.c, r.ns, r.opts)
}

// relistNote explains a relist in one line.
func relistNote(expiredRV string, objects, changes int) string {
	return fmt.Sprintf("resourceVersion %s expired (410 Gone); relisted %s, %s",
		expiredRV, plural(objects, "object"), plural(changes, "change"))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// between is the diff of two states of an object, without
// metadata.resourceVersion, and without metadata.managedFields unless
// --show-managed-fields.
func (r *watchRun) between(old, obj *unstructured.Unstructured) *change.Diff {
	if r.showManagedFields {
		return change.Differ{KeepNoise: true, Exclude: []string{"metadata.resourceVersion"}}.Between(old.Object, obj.Object)
	}
	return change.Between(old.Object, obj.Object)
}

// modified prints an update unless it changed nothing but noise
// (managedFields, unless --show-managed-fields) or --fields filters it
// out.
func (r *watchRun) modified(old, obj *unstructured.Unstructured) {
	d := r.between(old, obj)
	if d.Empty() {
		return
	}
	var changes []change.Change
	if r.filter != nil {
		if !r.filter.Match(d) {
			return
		}
		changes = r.filter.Changes(d)
	} else {
		changes = d.Changes()
	}
	r.event(client.Modified, obj, changes, d.Patch())
}

type jsonEvent struct {
	Type            client.EventType     `json:"type"`
	Namespace       string               `json:"namespace,omitempty"`
	Name            string               `json:"name"`
	ResourceVersion string               `json:"resourceVersion"`
	Time            string               `json:"time"`
	Changes         []explain.JSONChange `json:"changes,omitempty"`
	// Patch is the RFC 6902 JSON Patch of a MODIFIED event.
	Patch []change.Operation `json:"patch,omitempty"`
}

const (
	ansiReset  = "\x1b[0m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiBold   = "\x1b[1m"
)

// event prints one event; changes are printed only with --diff (text) or
// for MODIFIED (json).
//
// patch is, for MODIFIED, the RFC 6902 JSON Patch from the previous
// object to obj (noise left out, as the audit records have it); json
// output carries it beside the changes.
func (r *watchRun) event(typ client.EventType, obj *unstructured.Unstructured, changes []change.Change, patch []change.Operation) {
	now := r.now()
	if r.output == "json" {
		e := jsonEvent{
			Type: typ, Namespace: obj.GetNamespace(), Name: obj.GetName(),
			ResourceVersion: obj.GetResourceVersion(), Time: now.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		}
		if typ == client.Modified {
			e.Patch = patch
			if e.Patch == nil {
				e.Patch = []change.Operation{}
			}
			e.Changes = explain.JSONChanges(changes)
		}
		b, err := json.Marshal(e)
		if err != nil {
			b, _ = json.Marshal(jsonEvent{Type: typ, Namespace: e.Namespace, Name: e.Name, ResourceVersion: e.ResourceVersion, Time: e.Time})
		}
		fmt.Fprintf(r.out, "%s\n", b)
		return
	}
	var b strings.Builder
	header := fmt.Sprintf("%s %s %s rv=%s", now.Format("15:04:05"), typ, keyOf(obj), obj.GetResourceVersion())
	b.WriteString(r.paint(ansiBold, header))
	b.WriteByte('\n')
	if r.diff && typ == client.Modified {
		for _, c := range changes {
			b.WriteString(r.changeLine(c))
			b.WriteByte('\n')
		}
	}
	io.WriteString(r.out, b.String())
}

// changeLine formats one change for text output.
func (r *watchRun) changeLine(c change.Change) string {
	switch c.Op {
	case change.OpAdd:
		return r.paint(ansiGreen, fmt.Sprintf("  + %s: %s", c.Path, formatValue(c.New)))
	case change.OpRemove:
		return r.paint(ansiRed, fmt.Sprintf("  - %s: %s", c.Path, formatValue(c.Old)))
	case change.OpMove:
		return r.paint(ansiYellow, fmt.Sprintf("  > %s: moved from [%v] to [%v]", c.Path, c.Old, c.New))
	default:
		return r.paint(ansiYellow, fmt.Sprintf("  ~ %s: %s → %s", c.Path, formatValue(c.Old), formatValue(c.New)))
	}
}

func (r *watchRun) paint(color, s string) string {
	if !r.color {
		return s
	}
	return color + s + ansiReset
}

// maxValue bounds how much of a value a diff line shows.
const maxValue = 120

// formatValue prints plain strings bare and everything else as JSON,
// shortened to maxValue characters.
func formatValue(v any) string {
	var s string
	if str, ok := v.(string); ok && str != "" && !strings.ContainsAny(str, "\n\r\t\"") && strings.TrimSpace(str) == str {
		s = str
	} else if b, err := json.Marshal(v); err == nil {
		s = string(b)
	} else {
		s = fmt.Sprint(v)
	}
	if utf8.RuneCountInString(s) > maxValue {
		s = string([]rune(s)[:maxValue-1]) + "…"
	}
	return s
}

// missingNamespace returns a note's tail saying that the namespace watched
// does not exist, when a list of it found nothing: a misspelt -n otherwise
// looks like an empty namespace. The watch goes on (the namespace may be
// created); a namespace that cannot be read (forbidden) says nothing.
func (r *watchRun) missingNamespace(ctx context.Context, listed int) string {
	if listed > 0 || r.ns == "" {
		return ""
	}
	_, err := r.c.REST().Raw(ctx, "/api/v1/namespaces/"+url.PathEscape(r.ns))
	if !errors.Is(err, client.ErrNotFound) {
		return ""
	}
	return fmt.Sprintf(" (namespace %q does not exist; waiting for objects in it)", r.ns)
}

// note prints a line starting with #.
func (r *watchRun) note(format string, args ...any) {
	fmt.Fprintf(r.notes, "# "+format+"\n", args...)
}

func (r *watchRun) what() string {
	if len(r.opts.FieldSelector) > 0 {
		return r.res.String() + " " + strings.TrimPrefix(r.opts.FieldSelector, "metadata.name=")
	}
	return r.res.String()
}

func (r *watchRun) where() string {
	var s string
	switch {
	case !r.res.Namespaced:
	case r.ns == "":
		s = " in all namespaces"
	default:
		s = " in " + r.ns
	}
	if r.opts.LabelSelector != "" {
		s += " with labels " + r.opts.LabelSelector
	}
	return s
}

func keyOf(obj *unstructured.Unstructured) string { return explain.KeyOf(obj) }

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}

// restClient connects to the server of a kubeconfig and context (the
// defaults when both are empty); wrap, if set, wraps its transport.
// target is which server and namespace a client command talks to: the
// kubectl-style --kubeconfig, --context and -n flags.
type target struct {
	kubeconfig, context, namespace string
}

func (t *target) addFlags(f *pflag.FlagSet) {
	f.StringVar(&t.kubeconfig, "kubeconfig", "", "kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)")
	f.StringVar(&t.context, "context", "", "kubeconfig context (default: the current one)")
	f.StringVarP(&t.namespace, "namespace", "n", "", "namespace (default: the context's, else default)")
}

func restClient(kubeconfig, context string, wrap func(http.RoundTripper) http.RoundTripper) (*client.REST, *client.Config, error) {
	var (
		cfg *client.Config
		err error
	)
	if kubeconfig == "" && context == "" {
		cfg, err = client.Default()
	} else {
		cfg, err = client.FromKubeconfig(kubeconfig, context)
	}
	if err != nil {
		return nil, nil, err
	}
	if wrap != nil {
		cfg.WrapTransport = wrap
	}
	rc, err := client.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return rc, cfg, nil
}

// resolveResource finds the resource a command-line name means
// (explain.ResolveResource).
func resolveResource(ctx context.Context, rc *client.REST, arg string) (client.Resource, error) {
	return explain.ResolveResource(ctx, rc, arg)
}
