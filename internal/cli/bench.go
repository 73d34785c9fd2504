package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/objwatch/objwatch/bench"
)

func newBenchCommand() *cobra.Command {
	var (
		o            bench.Options
		targets      []string
		etcdURL      string
		jsonOut      string
		scenarios    []string
		idleWatchers int
	)
	cmd := &cobra.Command{
		Use:   "bench --target NAME=KUBECONFIG [--target ...]",
		Short: "Measure API servers side by side (writes, watch fan-out, lists, memory) and raw etcd",
		Long: `bench runs the same load against every target, one after another, and prints a
table with ratios against the first target. Targets are any Kubernetes-compatible
API servers reached through a kubeconfig. Use a fresh server per run for the
memory figure.

The informer scenario (not run by default: it takes minutes) compares client
libraries instead: objwatch's informer and client-go's SharedIndexInformer cache
--objects ConfigMaps of ~1 KiB from each target in turn, in this process, and
get a table of their own. Its relist waits until the server has compacted the
history (objwatch serve --compaction-interval).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			o.Progress = func(s string) { fmt.Fprintf(os.Stderr, "\r\033[K%s", s) }
			var (
				results   []bench.Result
				informers []*bench.InformerReport
			)
			plan := bench.Plan{IdleWatchers: idleWatchers}
			wantInformer := false
			for _, s := range scenarios {
				if s == "informer" {
					wantInformer = true
				} else {
					plan.Scenarios = append(plan.Scenarios, s)
				}
			}
			if err := plan.Validate(); err != nil {
				return fmt.Errorf("--scenarios: %w", err)
			}
			for _, spec := range targets {
				name, path, ok := strings.Cut(spec, "=")
				if !ok {
					return fmt.Errorf("--target %q: want NAME=KUBECONFIG", spec)
				}
				t, err := bench.LoadTarget(name, path)
				if err != nil {
					return err
				}
				r, err := bench.Run(ctx, t, &o, plan)
				results = append(results, r...)
				if err != nil {
					return err
				}
				if wantInformer {
					rep, err := bench.Informer(ctx, t, &o)
					if errors.Is(err, bench.ErrNotServed) {
						fmt.Fprintf(os.Stderr, "\r\033[Kskipped: %v\n", err)
					} else if err != nil {
						return err
					} else {
						informers = append(informers, rep)
					}
				}
			}
			if etcdURL != "" {
				r, err := bench.EtcdPuts(ctx, etcdURL, &o)
				if err != nil {
					return err
				}
				results = append(results, r...)
			}
			fmt.Fprint(os.Stderr, "\r\033[K")
			w := cmd.OutOrStdout()
			if len(results) > 0 {
				printResults(w, results)
			}
			for _, rep := range informers {
				fmt.Fprintln(w)
				if err := rep.WriteTable(w); err != nil {
					return err
				}
				results = append(results, rep.Results()...)
			}
			if jsonOut != "" {
				b, _ := json.MarshalIndent(results, "", "  ")
				return os.WriteFile(jsonOut, b, 0o644)
			}
			return nil
		},
	}
	cmd.AddCommand(newBenchScaleCommand(), newBenchPlotCommand(), newBenchABCommand())
	f := cmd.Flags()
	f.StringArrayVar(&targets, "target", nil, "NAME=KUBECONFIG of a server to measure (repeatable; the first is the baseline of ratios)")
	f.StringVar(&etcdURL, "etcd", "", "etcd client URL to measure raw puts against")
	f.StringVar(&jsonOut, "json", "", "write results as JSON to this file")
	f.StringSliceVar(&scenarios, "scenarios", []string{"writes", "memory", "list", "fanout", "idle"}, "scenarios to run (writes, memory, list, configmaps, fanout, idle; informer and deltas, not by default)")
	scenarioFlags(f, &o, &idleWatchers)
	return cmd
}

// scenarioFlags are the load settings of bench and bench ab.
func scenarioFlags(f *pflag.FlagSet, o *bench.Options, idleWatchers *int) {
	f.StringVar(&o.Namespace, "namespace", "default", "namespace for benchmark objects")
	f.IntVar(&o.Objects, "objects", 10000, "objects to create (ConfigMaps for informer)")
	f.IntVar(&o.Clients, "clients", 64, "concurrent writers")
	f.IntVar(&o.ObjectSize, "object-size", 1024, "approximate object size in bytes")
	f.IntVar(&o.Watchers, "watchers", 1000, "fan-out watchers")
	f.IntVar(idleWatchers, "idle-watchers", 10000, "watches held open by the idle scenario")
	f.IntVar(&o.WriteRate, "write-rate", 200, "fan-out writes per second")
	f.DurationVar(&o.Duration, "duration", 20*time.Second, "fan-out duration")
	f.IntVar(&o.ListRuns, "list-runs", 5, "repetitions of each list")
}

func newBenchABCommand() *cobra.Command {
	var (
		c         bench.ABConfig
		sides     []string
		scenarios []string
		jsonOut   string
	)
	cmd := &cobra.Command{
		Use:   "ab --side NAME=BINARY --side NAME=BINARY --etcd-binary ETCD",
		Short: "Compare two objwatch binaries, interleaved, each run on a fresh etcd and server",
		Long: `ab runs the scenarios against two objwatch binaries in turn, --rounds times
each, rounds alternating which goes first (A B, B A, A B, ...). Every run
starts a fresh etcd process (--etcd-binary, e.g. built with
'go build -o /tmp/etcd go.etcd.io/etcd/server/v3') and 'BINARY serve' on it,
so the server process is measured alone and both sides see the same
machine. It prints, per metric, each side's median, the median of the
rounds' ratios (second side over first) and their spread.

Build the base side from the commit a change started from (git worktree add)
and the change's own binary; record the table in docs/PERFORMANCE.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(sides) != 2 {
				return fmt.Errorf("--side: want exactly two, got %d", len(sides))
			}
			for i, spec := range sides {
				name, rest, _ := strings.Cut(spec, "=")
				fields := strings.Fields(rest)
				if name == "" || len(fields) == 0 {
					return fmt.Errorf("--side %q: want NAME=BINARY [SERVE-ARGS...]", spec)
				}
				c.Sides[i] = bench.ABSide{Name: name, Binary: fields[0], Args: fields[1:]}
			}
			if c.Sides[0].Name == c.Sides[1].Name {
				return fmt.Errorf("--side: the two sides need different names")
			}
			if c.EtcdBinary == "" {
				return fmt.Errorf("--etcd-binary is required")
			}
			for _, s := range scenarios {
				if s == "etcd" {
					c.EtcdPuts = true
				} else {
					c.Plan.Scenarios = append(c.Plan.Scenarios, s)
				}
			}
			if err := c.Plan.Validate(); err != nil {
				return fmt.Errorf("--scenarios: %w", err)
			}
			if c.Dir == "" {
				d, err := os.MkdirTemp("", "objwatch-ab-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				c.Dir = d
			}
			c.Options.Progress = func(s string) { fmt.Fprintf(os.Stderr, "\r\033[K%s", s) }
			c.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "\r\033[K"+format+"\n", args...) }
			rep, err := bench.AB(cmd.Context(), c)
			fmt.Fprint(os.Stderr, "\r\033[K")
			if rep != nil {
				if werr := rep.WriteTable(cmd.OutOrStdout()); werr != nil {
					return werr
				}
				if jsonOut != "" {
					b, _ := json.MarshalIndent(rep, "", "  ")
					if werr := os.WriteFile(jsonOut, b, 0o644); werr != nil {
						return werr
					}
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&sides, "side", nil, "NAME=BINARY [SERVE-ARGS...] of an objwatch binary and the serve flags of its side (twice; ratios are the second over the first)")
	f.StringVar(&c.EtcdBinary, "etcd-binary", "", "etcd binary each run starts on a fresh data directory")
	f.IntVar(&c.Rounds, "rounds", 3, "runs of each side")
	f.StringVar(&c.Dir, "dir", "", "directory for the runs' data and logs (default: a temporary one, removed at the end)")
	f.StringArrayVar(&c.ServeArgs, "serve-arg", nil, "argument appended to every 'BINARY serve' (repeatable), e.g. --serve-arg=--audit-log-path=/tmp/a.log")
	f.StringSliceVar(&scenarios, "scenarios", []string{"writes", "memory", "list", "fanout"}, "scenarios to run (writes, memory, list, configmaps, fanout, idle, deltas; etcd: raw puts on each run's etcd after its server stopped)")
	f.StringVar(&jsonOut, "json", "", "write every run's results as JSON to this file")
	scenarioFlags(f, &c.Options, &c.Plan.IdleWatchers)
	return cmd
}

func printResults(w io.Writer, rs []bench.Result) {
	type key struct{ metric, unit string }
	var keys []key
	byKey := map[key]map[string]float64{}
	var targets []string
	seenT := map[string]bool{}
	for _, r := range rs {
		k := key{r.Metric, r.Unit}
		if byKey[k] == nil {
			byKey[k] = map[string]float64{}
			keys = append(keys, k)
		}
		byKey[k][r.Target] = r.Value
		if !seenT[r.Target] {
			seenT[r.Target] = true
			targets = append(targets, r.Target)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "metric\tunit\t")
	for _, t := range targets {
		fmt.Fprintf(tw, "%s\t", t)
	}
	if len(targets) > 1 {
		for _, t := range targets[1:] {
			fmt.Fprintf(tw, "%s/%s\t", t, targets[0])
		}
	}
	fmt.Fprintln(tw)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t", k.metric, k.unit)
		for _, t := range targets {
			if v, ok := byKey[k][t]; ok {
				fmt.Fprintf(tw, "%.1f\t", v)
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		if len(targets) > 1 {
			base, ok := byKey[k][targets[0]]
			for _, t := range targets[1:] {
				if v, ok2 := byKey[k][t]; ok && ok2 && base != 0 {
					fmt.Fprintf(tw, "%.2f\t", v/base)
				} else {
					fmt.Fprint(tw, "-\t")
				}
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func newBenchScaleCommand() *cobra.Command {
	var (
		o          bench.Options
		target     string
		sizes      []int
		watches    []int
		restart    string
		jsonOut    string
		minFreeMiB uint64
		maxPages   int

		directEtcd, directPrefix string
		directAbove              int
	)
	cmd := &cobra.Command{
		Use:   "scale --target NAME=KUBECONFIG[,KUBECONFIG...] --json FILE",
		Short: "Measure how cost grows with objects and watches (scale curves)",
		Long: `scale loads ~1 KiB objects into a fresh server in steps (--objects, cumulative)
and after each step measures the step's create rate, heap and RSS per object,
lists (RV=0, consistent, paginated by 500, consistent limit=1) and, with
--restart-command, the time from a restart to /readyz and to the first full
RV=0 list. Then it runs the watch fan-out once per --watches count at
--write-rate events/s, the watches spread over every kubeconfig of --target
(servers of one etcd; the writes go to the first), and reports memory per
watch and delivery latency. Watches use one HTTP/1.1 connection each (one
file descriptor here and one on the server: the limit is raised as far as
allowed), or with --watch-http2 share HTTP/2 connections.

The restart command must stop the server, start it again in the background
and return once the new process has started. The run stops if the machine's
available memory drops below --min-available-mib. Points are written to
--json after every measurement; 'objwatch bench plot' draws them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			name, paths, ok := strings.Cut(target, "=")
			if !ok {
				return fmt.Errorf("--target %q: want NAME=KUBECONFIG[,KUBECONFIG...]", target)
			}
			if jsonOut == "" {
				return fmt.Errorf("--json is required")
			}
			var ts []*bench.Target
			for _, p := range strings.Split(paths, ",") {
				t, err := bench.LoadTarget(name, p)
				if err != nil {
					return err
				}
				ts = append(ts, t)
			}
			if len(watches) > 0 && !o.WatchHTTP2 {
				// A watch is a socket here and one on the server.
				want := uint64(slices.Max(watches)) + 4096
				if got, err := bench.RaiseFileLimit(want); err != nil || got < want {
					return fmt.Errorf("open-file limit %d, %d needed for %d watches on HTTP/1.1 (try --watch-http2): %v", got, want, slices.Max(watches), err)
				}
			}
			ctx, guard := bench.GuardMemory(cmd.Context(), minFreeMiB<<20)
			defer guard.Stop()
			o.Progress = func(s string) { fmt.Fprintf(os.Stderr, "\r\033[K%s", s) }
			var done []bench.Point
			save := func(ps []bench.Point) error {
				b, _ := json.MarshalIndent(append(append([]bench.Point(nil), done...), ps...), "", "  ")
				return os.WriteFile(jsonOut, b, 0o644)
			}
			var restartFn func(context.Context) error
			if restart != "" {
				restartFn = bench.ShellRestart(restart)
			}
			ps, err := bench.ScaleObjects(ctx, ts[0], &o, bench.ScaleConfig{
				Sizes: sizes, MaxPages: maxPages, Restart: restartFn, Save: save,
				DirectEtcd: directEtcd, DirectAbove: directAbove, DirectPrefix: directPrefix,
			})
			done = append(done, ps...)
			if err == nil && len(watches) > 0 {
				ps, err = bench.ScaleWatches(ctx, ts[0], ts, &o, watches, save)
				done = append(done, ps...)
			}
			fmt.Fprint(os.Stderr, "\r\033[K")
			for _, p := range done {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%d\t%s\t%.1f %s\n", p.Target, p.X, p.Metric, p.Value, p.Unit)
			}
			if gerr := guard.Err(); gerr != nil {
				return gerr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "NAME=KUBECONFIG[,KUBECONFIG...]: the server to measure; more kubeconfigs are more servers of the same etcd, which the watches spread over")
	f.IntSliceVar(&sizes, "objects", nil, "object counts to load up to and measure at, growing (e.g. 10000,100000)")
	f.IntSliceVar(&watches, "watches", nil, "watch counts to measure the fan-out at (e.g. 1000,10000)")
	f.StringVar(&restart, "restart-command", "", "sh command that restarts the server (stop, start in the background, return); empty: no restart measurement")
	f.StringVar(&jsonOut, "json", "", "write the points as JSON to this file (after every measurement)")
	f.Uint64Var(&minFreeMiB, "min-available-mib", 3072, "stop when the machine's available memory (MemAvailable) drops below this")
	f.StringVar(&o.Namespace, "namespace", "default", "namespace for benchmark objects")
	f.IntVar(&o.Clients, "clients", 64, "concurrent writers loading objects")
	f.IntVar(&o.ObjectSize, "object-size", 1024, "approximate object size in bytes")
	f.IntVar(&o.WriteRate, "write-rate", 20, "fan-out events per second")
	f.DurationVar(&o.Duration, "duration", 15*time.Second, "fan-out duration per watch count")
	f.IntVar(&o.ListRuns, "list-runs", 3, "repetitions of each list")
	f.IntVar(&maxPages, "max-pages", 0, "pages of 500 the paginated list walks at most (0: all; capped, only the page time is reported)")
	f.StringVar(&directEtcd, "direct-etcd", "", "the server's etcd client URL: objects beyond --direct-above are written there directly (copies of what the server stored for the first object), not through the API")
	f.IntVar(&directAbove, "direct-above", 100000, "with --direct-etcd, objects up to this count are created through the API")
	f.StringVar(&directPrefix, "direct-prefix", "/registry/"+bench.Group+"/"+bench.Plural+"/default/", "with --direct-etcd, the etcd key prefix of the benchmark objects (the server's storage prefix, group, resource and namespace)")
	f.BoolVar(&o.WatchHTTP2, "watch-http2", false, "multiplex the watches on HTTP/2 connections (default: one HTTP/1.1 connection per watch)")
	return cmd
}

func newBenchPlotCommand() *cobra.Command {
	var outDir string
	cmd := &cobra.Command{
		Use:   "plot --out DIR FILE.json...",
		Short: "Draw the scale curves of 'objwatch bench scale' JSON files as SVG charts",
		Long: `plot reads the points of one or more 'objwatch bench scale --json' files (one
per target or run; a target's name labels its lines) and writes the charts
scale-heap.svg, scale-list.svg, scale-restart.svg, scale-watch-memory.svg and
scale-watch-delivery.svg into --out, leaving out those without data.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			var points []bench.Point
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				var ps []bench.Point
				if err := json.Unmarshal(b, &ps); err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
				points = append(points, ps...)
			}
			for _, c := range bench.ScaleCharts(points) {
				p := filepath.Join(outDir, c.File)
				if err := os.WriteFile(p, c.SVG(), 0o644); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&outDir, "out", ".", "directory to write the SVG files to")
	return cmd
}
