// Package robustness_test runs objwatch's robustness harness
// (internal/robustness): a 3-member etcd cluster and 3 objwatch servers as
// processes, traffic, injected faults, then the checks. docs/ROBUSTNESS.md
// has the long run's command.
package robustness_test

import (
	"context"
	"flag"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/grpclog"

	"github.com/objwatch/objwatch/internal/robustness"
	"github.com/objwatch/objwatch/server/objects"
)

var (
	duration = flag.Duration("robustness.duration", 45*time.Second, "traffic duration of TestRobustness")
	report   = flag.String("robustness.report", "", "directory for TestRobustness's report (default: a temporary directory)")
	faults   = flag.String("robustness.faults", "", "comma-separated fault kinds injected in turn (default: all)")
	seed     = flag.Uint64("robustness.seed", 0, "random seed (default: from the clock)")
	netns    = flag.Bool("robustness.namespaces", false, "TestRobustness: etcd members in network namespaces, and the partition faults among all (root only)")
	txns     = flag.Bool("robustness.txns", true, "TestRobustness: a writer of multi-key etcd transactions beside the clients (2–5 ConfigMaps in one revision)")
	override = flag.Bool("robustness.override", false, "TestRobustness: the ConfigMaps on an etcd cluster of their own (--etcd-servers-overrides), the faulted one")
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The harness's etcd client reconnects to killed members all along.
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce            sync.Once
	etcdBin, objwatchBin string
	buildErr             error
)

// binaries builds etcd and objwatch once per test binary, into a cache
// directory of this checkout: go build leaves an up-to-date binary alone,
// where linking objwatch anew takes most of a minute on a loaded machine.
func binaries(t *testing.T) (string, string) {
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		etcdBin, objwatchBin, buildErr = robustness.BuildCached(ctx, "objwatch-robustness")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return etcdBin, objwatchBin
}

func runHarness(t *testing.T, cfg robustness.Config) *robustness.Report {
	t.Helper()
	cfg.EtcdBin, cfg.ObjwatchBin = binaries(t)
	cfg.Dir = t.TempDir()
	cfg.Logf = t.Logf
	start := time.Now()
	rep, err := robustness.Run(t.Context(), cfg)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Logf("%s(run took %v)", rep.Summary(), time.Since(start).Round(time.Second))
	return rep
}

// TestRobustness runs every fault kind against 3 servers on 3 etcd
// members and fails on any violation.
func TestRobustness(t *testing.T) {
	cfg := robustness.Config{Duration: *duration, ReportDir: *report, Seed: *seed, Namespaces: *netns, Override: *override, NoTxns: !*txns}
	if *netns {
		if err := robustness.NamespacesAvailable(); err != nil {
			t.Fatalf("-robustness.namespaces: %v", err)
		}
		cfg.Faults = append(slices.Clone(robustness.AllFaults), robustness.PartitionFaults...)
	}
	if *faults != "" {
		cfg.Faults = strings.Split(*faults, ",")
	}
	checkRun(t, cfg)
}

// TestRobustnessPartitions cuts etcd members off from their peers (the
// leader, a follower; each member in a network namespace of its own)
// while the servers still reach every member, beside quorum loss.
func TestRobustnessPartitions(t *testing.T) {
	if err := robustness.NamespacesAvailable(); err != nil {
		t.Skipf("etcd members in network namespaces: %v", err)
	}
	checkRun(t, robustness.Config{
		Duration: 25 * time.Second, Seed: *seed, Namespaces: true, ReportDir: *report,
		Faults: append(slices.Clone(robustness.PartitionFaults), robustness.FaultLoseQuorum),
	})
}

// TestRobustnessOverride runs the servers with the ConfigMaps the traffic
// writes on an etcd cluster of their own (--etcd-servers-overrides) and
// injects the faults of that cluster and of the servers: the watch cache,
// the collector and the compaction of an overridden resource go through
// the same checks as on the main cluster.
func TestRobustnessOverride(t *testing.T) {
	checkRun(t, robustness.Config{
		Duration: 30 * time.Second, Seed: *seed, ReportDir: *report, Override: true,
		Faults: []string{
			robustness.FaultKillEtcdLeader, robustness.FaultKillServer, robustness.FaultReplaceEtcd,
			robustness.FaultNetReset, robustness.FaultPauseEtcd, robustness.FaultLoseQuorum,
		},
	})
}

// checkRun runs the harness and fails on any violation, harness error or
// fault that could not be injected.
func checkRun(t *testing.T, cfg robustness.Config) {
	t.Helper()
	rep := runHarness(t, cfg)
	for _, e := range rep.HarnessErrors {
		t.Errorf("harness: %s", e)
	}
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations (report in %s)", len(rep.Violations), rep.Dir)
	}
	injected := map[string]bool{}
	for _, f := range rep.Faults {
		injected[f.Kind] = true
		if f.Err != "" {
			t.Errorf("fault %s: %s", f.Kind, f.Err)
		}
	}
	if rep.Operations["update 200"] == 0 || rep.Events == 0 {
		t.Errorf("the run checked %d updates and %d watch events: no traffic", rep.Operations["update 200"], rep.Events)
	}
	for _, k := range cfg.Faults {
		if !injected[k] {
			t.Logf("fault %s was not injected in this run (longer -robustness.duration)", k)
		}
	}
}

// TestRobustnessCatchesDroppedEvent runs the harness against servers
// with a test fault that drops one watch event per process: the watch
// checks must report it.
func TestRobustnessCatchesDroppedEvent(t *testing.T) {
	rep := runHarness(t, robustness.Config{
		Duration: 12 * time.Second, Servers: 2, Clients: 3, Watchers: 3,
		Faults: []string{robustness.FaultKillServer}, DebugFault: objects.FaultDropEventAfterRestart,
	})
	if rep.Count("reliable")+rep.Count("resumable") == 0 {
		t.Errorf("no reliable or resumable violation reported against servers that drop an event; violations: %v", rep.Violations)
	}
}

// TestRobustnessCatchesSplitRevision runs the harness against servers
// with a test fault that sends only the first event of each revision in a
// watch from a resourceVersion: the multi-key transactions' revisions
// must make the watch checks report it, and the transactions must have
// been committed and checked.
func TestRobustnessCatchesSplitRevision(t *testing.T) {
	rep := runHarness(t, robustness.Config{
		Duration: 10 * time.Second, Servers: 2, Clients: 2, Watchers: 3, Seed: *seed, ReportDir: *report,
		Faults: []string{robustness.FaultKillServer}, DebugFault: objects.FaultDropRestOfRevision,
	})
	if rep.Txns["committed"] == 0 {
		t.Fatalf("no multi-key transaction committed: %v", rep.Txns)
	}
	if rep.Count("atomic") == 0 || rep.Count("reliable")+rep.Count("resumable") == 0 {
		t.Errorf("%d atomic and %d reliable or resumable violations reported against servers that split revisions, want both; violations: %v",
			rep.Count("atomic"), rep.Count("reliable")+rep.Count("resumable"), rep.Violations)
	}
}
