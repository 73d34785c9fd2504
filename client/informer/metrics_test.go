package informer_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// perInformer is how many series each informer with one handler exports
// per metric, once it has synced and delivered something:
// objwatch_informer_event_lag_seconds is checked apart (one or two
// series, by source).
var perInformer = map[string]int{
	"objwatch_informer_objects":                  1,
	"objwatch_informer_watch_events_total":       4, // by type
	"objwatch_informer_lists_total":              1,
	"objwatch_informer_watches_total":            1,
	"objwatch_informer_relists_total":            1,
	"objwatch_informer_watch_restarts_total":     1,
	"objwatch_informer_errors_total":             1,
	"objwatch_informer_handler_backlog":          1,
	"objwatch_informer_handler_delivered_total":  1,
	"objwatch_informer_handler_coalesced_total":  1,
	"objwatch_informer_handler_duration_seconds": 1,
	"objwatch_informer_refused":                  2, // by verb
	"objwatch_informer_delta_events_total":       1,
	"objwatch_informer_delta_failures_total":     1,
}

const lagMetric = "objwatch_informer_event_lag_seconds"

// scrape is what a Gather of the informers' metrics holds.
type scrape struct {
	// series counts the series of each objwatch_informer_ metric by the
	// value of its informer label ("" for series without it).
	series map[string]map[string]int
	// values holds the value of the series that have a single number
	// (gauges and counters), by metric, informer and handler label.
	values map[[3]string]float64
}

func gatherInformers(t *testing.T, g prometheus.Gatherer) scrape {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	s := scrape{series: map[string]map[string]int{}, values: map[[3]string]float64{}}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "objwatch_informer_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var inf, handler string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "informer":
					inf = l.GetValue()
				case "handler":
					handler = l.GetValue()
				}
			}
			if s.series[inf] == nil {
				s.series[inf] = map[string]int{}
			}
			s.series[inf][name]++
			if m.GetHistogram() == nil {
				s.values[[3]string{name, inf, handler}] = value(m)
			}
		}
	}
	return s
}

// check reports whether the scrape has exactly the series of the named
// informers, each with one handler "h" and perInformer series (and lag
// series if it has objects).
func (s scrape) check(t *testing.T, names ...string) {
	t.Helper()
	if got, want := slices.Sorted(maps.Keys(s.series)), slices.Sorted(slices.Values(names)); !slices.Equal(got, want) {
		t.Errorf("series of informers %q, want %q", got, want)
	}
	for _, name := range names {
		got := maps.Clone(s.series[name])
		lag := got[lagMetric]
		delete(got, lagMetric)
		if !maps.Equal(got, perInformer) {
			t.Errorf("informer %q: series per metric %v, want %v", name, got, perInformer)
		}
		if least := min(s.objects(name), 1); float64(lag) < least || lag > 2 {
			t.Errorf("informer %q: %d series of %s, want %v to 2", name, lag, lagMetric, least)
		}
	}
}

func (s scrape) objects(informer string) float64 {
	return s.values[[3]string{"objwatch_informer_objects", informer, ""}]
}

func (s scrape) delivered(informer string) float64 {
	return s.values[[3]string{"objwatch_informer_handler_delivered_total", informer, "h"}]
}

// createLabelled creates n ConfigMaps in default labelled metrics=<label>.
func createLabelled(t *testing.T, e *env, label string, n int) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	for j := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", label, j),
			Labels: map[string]string{"metrics": label}}}
		if _, err := e.writer.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// startLabelled runs an informer named name of the ConfigMaps labelled
// metrics=<name>, with a handler "h", exporting to reg, and waits until
// the handler has synced. The returned function stops it.
func startLabelled(t *testing.T, e *env, reg prometheus.Registerer, name string) (*informer.SharedInformer[CM], func()) {
	t.Helper()
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{
		Name: name, Metrics: reg, Namespace: "default", LabelSelector: "metrics=" + name,
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := inf.AddHandler(informer.HandlerFuncs[CM]{}, informer.HandlerOptions{Name: "h"})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, inf)
	if err := informer.WaitForSync(testContext(t, 30*time.Second), h.HasSynced); err != nil {
		t.Fatal(err)
	}
	return inf, stop
}

// TestMetricsSharedRegistry: any number of informers export to one
// registry, each with its own series; a second informer of a name in use
// is refused with ErrDuplicateName and changes nothing; a stopped
// informer's series are gone and its name is free again.
func TestMetricsSharedRegistry(t *testing.T) {
	e := startEnv(t)
	for _, n := range []int{2, 10} {
		t.Run(fmt.Sprint(n, " informers"), func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			var names []string
			stops := map[string]func(){}
			for i := range n {
				name := fmt.Sprintf("shared%d-%d", n, i)
				createLabelled(t, e, name, i+1)
				_, stops[name] = startLabelled(t, e, reg, name)
				names = append(names, name)
			}
			s := gatherInformers(t, reg)
			s.check(t, names...)
			for i, name := range names {
				if got := s.objects(name); got != float64(i+1) {
					t.Errorf("objwatch_informer_objects{informer=%q} = %v, want %d", name, got, i+1)
				}
				if got := s.delivered(name); got != float64(i+1) {
					t.Errorf("objwatch_informer_handler_delivered_total{informer=%q} = %v, want %d", name, got, i+1)
				}
			}

			_, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Name: names[1], Metrics: reg})
			if !errors.Is(err, informer.ErrDuplicateName) {
				t.Fatalf("New(name in use) error = %v, want ErrDuplicateName", err)
			}
			if are := (prometheus.AlreadyRegisteredError{}); !errors.As(err, &are) || !strings.Contains(err.Error(), names[1]) {
				t.Errorf("New(name in use) error = %q: want it to name the informer and wrap prometheus.AlreadyRegisteredError", err)
			}
			gatherInformers(t, reg).check(t, names...)

			stops[names[0]]()
			gatherInformers(t, reg).check(t, names[1:]...)
			again, stop := startLabelled(t, e, reg, names[0])
			if again.Name() != names[0] {
				t.Fatalf("Name() = %q", again.Name())
			}
			s = gatherInformers(t, reg)
			s.check(t, names...)
			if got := s.objects(names[0]); got != 1 {
				t.Errorf("objwatch_informer_objects{informer=%q} of the new informer = %v, want 1", names[0], got)
			}
			stop()
			for _, name := range names[1:] {
				stops[name]()
			}
			if s := gatherInformers(t, reg); len(s.series) != 0 {
				t.Errorf("series after every informer stopped: %v", s.series)
			}
		})
	}
}

// TestFactoryMetrics: a factory's informers share its registry, one named
// after each selection (the Go type added for a second type of the same
// selection). A second factory asking for a name in use on that registry
// gets a working informer without metrics and the error from Err, not a
// panic; with a FactoryOptions.Name, a factory shares the registry.
func TestFactoryMetrics(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 60*time.Second)
	createLabelled(t, e, "factory", 3)
	reg := prometheus.NewPedanticRegistry()
	f := informer.NewFactory(e.reader, informer.FactoryOptions{Metrics: reg})
	sels := []informer.Selection{{}, {Namespace: "default"}, {Namespace: "kube-system"}, {Namespace: "default", LabelSelector: "metrics=factory"}}
	var infs []*informer.SharedInformer[CM]
	for _, sel := range sels {
		infs = append(infs, informer.Shared[CM](f, configMaps, sel))
	}
	dyn := informer.Shared[*unstructured.Unstructured](f, configMaps, informer.Selection{Namespace: "default", LabelSelector: "metrics=factory"})
	var handlers []func() bool
	for _, inf := range infs {
		h, err := inf.AddHandler(informer.HandlerFuncs[CM]{}, informer.HandlerOptions{Name: "h"})
		if err != nil {
			t.Fatal(err)
		}
		handlers = append(handlers, h.HasSynced)
	}
	h, err := dyn.AddHandler(informer.HandlerFuncs[*unstructured.Unstructured]{}, informer.HandlerOptions{Name: "h"})
	if err != nil {
		t.Fatal(err)
	}
	handlers = append(handlers, h.HasSynced)
	stopF := run(t, f)
	if err := informer.WaitForSync(ctx, handlers...); err != nil {
		t.Fatal(err)
	}
	if err := f.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	names := []string{"configmaps", "configmaps/default", "configmaps/kube-system", "configmaps/default?labels=metrics=factory",
		"configmaps/default?labels=metrics=factory (*unstructured.Unstructured)"}
	var got []string
	for _, inf := range infs {
		got = append(got, inf.Name())
	}
	got = append(got, dyn.Name())
	if !slices.Equal(got, names) {
		t.Errorf("informer names %q, want %q", got, names)
	}
	s := gatherInformers(t, reg)
	s.check(t, names...)
	if got := s.objects(names[3]); got != 3 || s.objects(names[4]) != 3 {
		t.Errorf("objects of the labelled informers = %v and %v, want 3", got, s.objects(names[4]))
	}

	// A second factory on the same registry: the same selection's name is
	// taken.
	f2 := informer.NewFactory(e.reader, informer.FactoryOptions{Metrics: reg})
	other := informer.Shared[CM](f2, configMaps, informer.Selection{Namespace: "default", LabelSelector: "metrics=factory"})
	distinct := informer.Shared[CM](f2, configMaps, informer.Selection{Namespace: "default", LabelSelector: "metrics=other"})
	err = f2.Err()
	if !errors.Is(err, informer.ErrDuplicateName) || !strings.Contains(err.Error(), names[3]) {
		t.Errorf("second factory: Err() = %v, want ErrDuplicateName for %q", err, names[3])
	}
	// With a name of its own, a third one shares the registry.
	f3 := informer.NewFactory(e.reader, informer.FactoryOptions{Name: "f3", Metrics: reg})
	named := informer.Shared[CM](f3, configMaps, informer.Selection{Namespace: "default", LabelSelector: "metrics=factory"})
	if err := f3.Err(); err != nil {
		t.Errorf("named factory: Err() = %v, want nil", err)
	}
	if want := "f3/" + names[3]; named.Name() != want {
		t.Errorf("named factory's informer: Name() = %q, want %q", named.Name(), want)
	}
	var synced []func() bool
	for _, inf := range []*informer.SharedInformer[CM]{other, distinct, named} {
		h, err := inf.AddHandler(informer.HandlerFuncs[CM]{}, informer.HandlerOptions{Name: "h"})
		if err != nil {
			t.Fatal(err)
		}
		synced = append(synced, h.HasSynced)
	}
	stopF2, stopF3 := run(t, f2), run(t, f3)
	if err := informer.WaitForSync(ctx, synced...); err != nil {
		t.Fatal(err)
	}
	if other.Lister().Len() != 3 {
		t.Errorf("the informer without metrics caches %d objects, want 3", other.Lister().Len())
	}
	// f's informers, f2's of a free name, and f3's.
	s = gatherInformers(t, reg)
	s.check(t, append(names, "configmaps/default?labels=metrics=other", "f3/"+names[3])...)
	if got := s.objects("f3/" + names[3]); got != 3 {
		t.Errorf("objects of f3's informer = %v, want 3", got)
	}

	stopF()
	stopF2()
	stopF3()
	if s := gatherInformers(t, reg); len(s.series) != 0 {
		t.Errorf("series after the factories stopped: %v", s.series)
	}
}

// defaultRegistererEnv marks the child process TestDefaultRegisterer runs.
const defaultRegistererEnv = "OBJWATCH_TEST_DEFAULT_REGISTERER"

// TestDefaultRegisterer: informers share prometheus.DefaultRegisterer.
// That registry is global, so the test runs in a child process of this
// test binary: nothing it registers can meet another test's informers.
func TestDefaultRegisterer(t *testing.T) {
	if os.Getenv(defaultRegistererEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDefaultRegisterer$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), defaultRegistererEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "checked the default registerer") {
			t.Fatalf("child process: %v\n%s", err, out)
		}
		return
	}
	e := startEnv(t)
	names := []string{"default-a", "default-b", "default-c"}
	stops := map[string]func(){}
	for i, name := range names {
		createLabelled(t, e, name, i+1)
		_, stops[name] = startLabelled(t, e, prometheus.DefaultRegisterer, name)
	}
	s := gatherInformers(t, prometheus.DefaultGatherer)
	s.check(t, names...)
	for i, name := range names {
		if got := s.objects(name); got != float64(i+1) {
			t.Errorf("objwatch_informer_objects{informer=%q} = %v, want %d", name, got, i+1)
		}
	}
	if _, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Name: names[0], Metrics: prometheus.DefaultRegisterer}); !errors.Is(err, informer.ErrDuplicateName) {
		t.Errorf("New(name in use) error = %v, want ErrDuplicateName", err)
	}
	stops[names[1]]()
	gatherInformers(t, prometheus.DefaultGatherer).check(t, names[0], names[2])
	stops[names[0]]()
	stops[names[2]]()
	if s := gatherInformers(t, prometheus.DefaultGatherer); len(s.series) != 0 {
		t.Errorf("series after every informer stopped: %v", s.series)
	}
	if !t.Failed() {
		fmt.Println("checked the default registerer")
	}
}
