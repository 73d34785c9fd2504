package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

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
			want := map[string]bool{}
			for _, s := range scenarios {
				switch s {
				case "writes", "memory", "list", "fanout", "idle", "informer":
					want[s] = true
				default:
					return fmt.Errorf("--scenarios: unknown scenario %q", s)
				}
			}
			// Every scenario but informer uses the benchmark CRD.
			crd := want["writes"] || want["memory"] || want["list"] || want["fanout"] || want["idle"]
			for _, spec := range targets {
				name, path, ok := strings.Cut(spec, "=")
				if !ok {
					return fmt.Errorf("--target %q: want NAME=KUBECONFIG", spec)
				}
				t, err := bench.LoadTarget(name, path)
				if err != nil {
					return err
				}
				var mem0 bench.MemorySample
				if crd {
					if err := bench.Setup(ctx, t, &o); err != nil {
						return err
					}
					if mem0, err = bench.SampleMemory(ctx, t); err != nil {
						return err
					}
				}
				run := func(s string, f func() ([]bench.Result, error)) error {
					if !want[s] {
						return nil
					}
					r, err := f()
					results = append(results, r...)
					return err
				}
				steps := []struct {
					name string
					f    func() ([]bench.Result, error)
				}{
					{"writes", func() ([]bench.Result, error) { return bench.Writes(ctx, t, &o) }},
					{"memory", func() ([]bench.Result, error) { return bench.Memory(ctx, t, &o, mem0) }},
					{"list", func() ([]bench.Result, error) { return bench.Lists(ctx, t, &o) }},
					{"fanout", func() ([]bench.Result, error) { return bench.Fanout(ctx, t, &o) }},
					{"idle", func() ([]bench.Result, error) {
						idle := o
						idle.Watchers = idleWatchers
						return bench.IdleWatches(ctx, t, &idle)
					}},
				}
				for _, st := range steps {
					if err := run(st.name, st.f); err != nil {
						return err
					}
				}
				if crd {
					bench.Cleanup(ctx, t)
				}
				if want["informer"] {
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
	f := cmd.Flags()
	f.StringArrayVar(&targets, "target", nil, "NAME=KUBECONFIG of a server to measure (repeatable; the first is the baseline of ratios)")
	f.StringVar(&etcdURL, "etcd", "", "etcd client URL to measure raw puts against")
	f.StringVar(&jsonOut, "json", "", "write results as JSON to this file")
	f.StringSliceVar(&scenarios, "scenarios", []string{"writes", "memory", "list", "fanout", "idle"}, "scenarios to run (writes, memory, list, fanout, idle; informer, not by default)")
	f.StringVar(&o.Namespace, "namespace", "default", "namespace for benchmark objects")
	f.IntVar(&o.Objects, "objects", 10000, "objects to create (ConfigMaps for informer)")
	f.IntVar(&o.Clients, "clients", 64, "concurrent writers")
	f.IntVar(&o.ObjectSize, "object-size", 1024, "approximate object size in bytes")
	f.IntVar(&o.Watchers, "watchers", 1000, "fan-out watchers")
	f.IntVar(&idleWatchers, "idle-watchers", 10000, "watches held open by the idle scenario")
	f.IntVar(&o.WriteRate, "write-rate", 200, "fan-out writes per second")
	f.DurationVar(&o.Duration, "duration", 20*time.Second, "fan-out duration")
	f.IntVar(&o.ListRuns, "list-runs", 5, "repetitions of each list")
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
