package informer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/testenv"
)

type UCM = *unstructured.Unstructured

// callLog records a handler's calls as text, each object rendered by
// show, so that two informers' calls can be compared.
type callLog[T client.Object] struct {
	show func(T) string
	mu   sync.Mutex
	log  []string
}

func (c *callLog[T]) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, s)
}

func (c *callLog[T]) handler() informer.Handler[T] {
	return informer.HandlerFuncs[T]{
		Add:    func(obj T, initial bool) { c.add(fmt.Sprintf("add %s", c.show(obj))) },
		Update: func(old, new T) { c.add(fmt.Sprintf("update %s -> %s", c.show(old), c.show(new))) },
		Delete: func(obj T, unknown bool) { c.add(fmt.Sprintf("delete %s unknown=%v", c.show(obj), unknown)) },
	}
}

func (c *callLog[T]) calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

func (c *callLog[T]) has(prefix string) bool {
	return slices.ContainsFunc(c.calls(), func(s string) bool { return strings.HasPrefix(s, prefix) })
}

func showCM(cm CM) string {
	return fmt.Sprintf("%s rv=%s gen=%d labels=%v data=%v", cm.Name, cm.ResourceVersion, cm.Generation, cm.Labels, cm.Data)
}

func showUCM(u UCM) string {
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	return fmt.Sprintf("%s rv=%s gen=%d labels=%v data=%v", u.GetName(), u.GetResourceVersion(), u.GetGeneration(), u.GetLabels(), data)
}

// startMasked starts an informer of the ConfigMaps labelled app=<app> with
// opts and a call log.
func startMasked[T client.Object](t *testing.T, c *client.Client[T], app string, show func(T) string, opts informer.Options[T]) (*informer.SharedInformer[T], *callLog[T]) {
	t.Helper()
	opts.Namespace, opts.LabelSelector = "default", "app="+app
	inf, err := informer.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	cl := &callLog[T]{show: show}
	if _, err := inf.AddHandler(cl.handler(), informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	return inf, cl
}

// maskWrites writes the sequence the masked informers see: changes inside
// and outside the mask /data/watched, then the object "end".
func maskWrites(t *testing.T, ctx context.Context, c *client.Client[CM], app string) {
	t.Helper()
	cm := func(name, watched, other string) CM {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": app}},
			Data: map[string]string{"watched": watched, "other": other}}
	}
	update := func(name string, change func(CM)) {
		t.Helper()
		cur, err := c.Get(ctx, "default", name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(cur)
		if _, err := c.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(obj CM) {
		t.Helper()
		if _, err := c.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(cm("a", "0", "0"))
	update("a", func(o CM) { o.Data["other"] = "1" })
	update("a", func(o CM) { o.Data["other"] = "2" })
	update("a", func(o CM) { o.Data["watched"] = "1" })
	update("a", func(o CM) { o.Labels["extra"] = "x" })
	create(cm("b", "0", "0"))
	update("b", func(o CM) { o.Data["other"] = "1"; o.Data["watched"] = "1" })
	update("b", func(o CM) { delete(o.Data, "watched") })
	update("b", func(o CM) { o.Data["other"] = "3" })
	update("a", func(o CM) { o.Data["watched"] = strings.Repeat("w", 30) })
	if err := c.Delete(ctx, "default", "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	create(cm("end", "", ""))
}

// TestFieldMaskSameCalls: informers with a field mask (with and without
// projection and deltas) deliver the same handler calls whether the
// server applies the mask or the informer emulates it
// (DisableServerExtensions), and never an update the mask does not see.
func TestFieldMaskSameCalls(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 60*time.Second)
	mask := []string{"/data/watched"}
	ucli := client.NewUnstructured(e.reader, configMaps)
	ext, err := e.reader.WatchExtensions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	type variant struct {
		name      string
		mask      bool
		deltas    bool
		calls     func() []string
		synced    func() bool
		hasEnd    func() bool
		projected bool
	}
	var vs []variant
	for _, o := range []struct {
		name                 string
		projection, deltas   bool
		unstructured, noMask bool
		compact              bool
	}{
		{name: "mask"},
		{name: "mask+projection", projection: true},
		{name: "mask+projection+deltas", projection: true, deltas: true},
		{name: "mask+deltas", deltas: true},
		{name: "deltas", deltas: true, noMask: true},
		{name: "unstructured mask+projection+deltas", projection: true, deltas: true, unstructured: true},
		{name: "compact mask+deltas", deltas: true, compact: true},
		{name: "compact unstructured mask+projection+deltas", projection: true, deltas: true, unstructured: true, compact: true},
	} {
		for _, emulate := range []bool{false, true} {
			name := fmt.Sprintf("%s emulated=%v", o.name, emulate)
			var m []string
			if !o.noMask {
				m = mask
			}
			v := variant{name: name, mask: !o.noMask, projected: o.projection, deltas: o.deltas}
			if o.unstructured {
				inf, cl := startMasked(t, ucli, "masked", showUCM, informer.Options[UCM]{Name: name, Metrics: reg,
					FieldMask: m, Projection: o.projection, Deltas: o.deltas, DisableServerExtensions: emulate, Compact: o.compact})
				v.calls, v.synced, v.hasEnd = cl.calls, inf.HasSynced, func() bool { return cl.has("add end ") }
			} else {
				inf, cl := startMasked(t, client.NewClient[CM](e.reader, configMaps), "masked", showCM, informer.Options[CM]{Name: name, Metrics: reg,
					FieldMask: m, Projection: o.projection, Deltas: o.deltas, DisableServerExtensions: emulate, Compact: o.compact})
				v.calls, v.synced, v.hasEnd = cl.calls, inf.HasSynced, func() bool { return cl.has("add end ") }
			}
			vs = append(vs, v)
		}
	}
	for _, v := range vs {
		waitFor(t, v.name+" synced", v.synced)
	}
	maskWrites(t, ctx, e.writer, "masked")
	for _, v := range vs {
		waitFor(t, v.name+" sees the end", v.hasEnd)
	}
	for i := 0; i < len(vs); i += 2 {
		server, emulated := vs[i], vs[i+1]
		if a, b := server.calls(), emulated.calls(); !slices.Equal(a, b) {
			t.Errorf("%s and %s differ:\n%s\n---\n%s", server.name, emulated.name, strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
		// On a server with the extensions, the mask keeps MODIFIED events
		// off the wire and deltas come as patches; emulated, neither.
		modified := func(v variant) float64 {
			return metricValue(t, reg, "objwatch_informer_watch_events_total", v.name, "MODIFIED")
		}
		deltas := func(v variant) float64 {
			return metricValue(t, reg, "objwatch_informer_delta_events_total", v.name, "")
		}
		t.Logf("%s: %v MODIFIED, %v deltas; emulated: %v MODIFIED, %v deltas", server.name, modified(server), deltas(server), modified(emulated), deltas(emulated))
		if server.mask && ext.Has(client.ExtFieldMask) && modified(server) >= modified(emulated) {
			t.Errorf("%s: %v MODIFIED events, emulated %v: the server did not mask", server.name, modified(server), modified(emulated))
		}
		if server.deltas && ext.Has(client.ExtWatchDeltas) && deltas(server) == 0 {
			t.Errorf("%s: no delta events from a server that offers them", server.name)
		}
		if deltas(emulated) != 0 {
			t.Errorf("%s: %v delta events", emulated.name, deltas(emulated))
		}
	}
	for _, v := range vs {
		calls := v.calls()
		updates := 0
		for _, c := range calls {
			if strings.HasPrefix(c, "update ") {
				updates++
				if v.mask && (strings.Contains(c, "other:1]") && strings.Contains(c, "other:2]")) {
					t.Errorf("%s: an update outside the mask: %s", v.name, c)
				}
			}
			if v.projected && (strings.Contains(c, "other:") || strings.Contains(c, "extra:")) {
				t.Errorf("%s: unprojected object: %s", v.name, c)
			}
		}
		// With the mask: a's two watched changes, b's two; without: all 8.
		if want := map[bool]int{true: 4, false: 8}[v.mask]; updates != want {
			t.Errorf("%s: %d updates, want %d:\n%s", v.name, updates, want, strings.Join(calls, "\n"))
		}
	}
}

// TestFieldMaskOptions: New refuses malformed masks and a projection
// without a mask, with errors that say so.
func TestFieldMaskOptions(t *testing.T) {
	e := startEnv(t)
	c := client.NewClient[CM](e.reader, configMaps)
	for _, o := range []struct {
		opts informer.Options[CM]
		err  string
	}{
		{informer.Options[CM]{FieldMask: []string{"data"}}, "FieldMask: field mask: pointer \"data\" does not start with /"},
		{informer.Options[CM]{FieldMask: []string{"/a~2"}}, "FieldMask"},
		{informer.Options[CM]{FieldMask: []string{""}}, "empty pointer"},
		{informer.Options[CM]{FieldMask: []string{}}, "no pointers"},
		{informer.Options[CM]{FieldMask: []string{strings.Repeat("/a", 101)[:len(strings.Repeat("/a", 101))]}}, ""},
		{informer.Options[CM]{FieldMask: strings.Split(strings.Repeat("/a,", 101), ",")[:101]}, "more than 100"},
		{informer.Options[CM]{Projection: true}, "Projection without a FieldMask"},
	} {
		_, err := informer.New(c, o.opts)
		switch {
		case o.err == "" && err != nil:
			t.Errorf("%v: %v", o.opts.FieldMask, err)
		case o.err != "" && (err == nil || !strings.Contains(err.Error(), o.err)):
			t.Errorf("%v: error %v, want one with %q", o.opts.FieldMask, err, o.err)
		}
	}
}

// TestDeltasMatchWrites: an informer with Deltas caches, after each
// update, exactly the object the update returned (the server's state at
// that resourceVersion), typed and unstructured, with and without a
// projection; on a server that offers deltas it got them as patches.
func TestDeltasMatchWrites(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 60*time.Second)
	ext, err := e.reader.WatchExtensions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	typed, _ := startMasked(t, client.NewClient[CM](e.reader, configMaps), "deltas", showCM,
		informer.Options[CM]{Name: "typed", Deltas: true, Metrics: reg})
	unstr, _ := startMasked(t, client.NewUnstructured(e.reader, configMaps), "deltas", showUCM,
		informer.Options[UCM]{Name: "unstructured", Deltas: true, Metrics: reg, DetectMutations: true,
			OnMutation: func(err error) { t.Errorf("a delta event changed a cached object: %v", err) }})
	mask := []string{"/data/watched", "/metadata/labels"}
	proj, _ := startMasked(t, client.NewUnstructured(e.reader, configMaps), "deltas", showUCM,
		informer.Options[UCM]{Name: "projected", Deltas: true, FieldMask: mask, Projection: true, Metrics: reg})
	dropped, _ := startMasked(t, client.NewClient[CM](e.reader, configMaps), "deltas", showCM,
		informer.Options[CM]{Name: "dropped", Deltas: true, DropManagedFields: true, Metrics: reg})
	for _, synced := range []func() bool{typed.HasSynced, unstr.HasSynced, proj.HasSynced, dropped.HasSynced} {
		waitFor(t, "sync", synced)
	}
	m, err := fieldmask.Parse(mask...)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default",
		Labels: map[string]string{"app": "deltas"}}, Data: map[string]string{"watched": "0", "big": strings.Repeat("x", 4000)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changes := []func(CM){
		func(o CM) { o.Data["watched"] = "1" },
		func(o CM) { o.Data["new"] = "n"; o.Data["watched"] = "2" },
		func(o CM) { delete(o.Data, "new"); o.Labels["l"] = "1"; o.Data["watched"] = "3" },
		func(o CM) { o.Annotations = map[string]string{"a/b": "~"}; o.Data["watched"] = "4" },
		func(o CM) { o.Data = map[string]string{"watched": "5"} },
		func(o CM) { o.BinaryData = map[string][]byte{"bin": {1, 2, 3}}; o.Data["watched"] = "6" },
	}
	for i, change := range changes {
		change(cur)
		if cur, err = e.writer.Update(ctx, cur, metav1.UpdateOptions{FieldManager: fmt.Sprintf("manager-%d", i%2)}); err != nil {
			t.Fatal(err)
		}
		want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cur)
		if err != nil {
			t.Fatal(err)
		}
		wantJSON, _ := json.Marshal(want)
		projJSON, _ := json.Marshal(m.Project(want))
		rv := cur.ResourceVersion
		waitFor(t, fmt.Sprintf("update %d at rv %s", i, rv), func() bool {
			a, ok1 := typed.Lister().Get("default", "d")
			b, ok2 := unstr.Lister().Get("default", "d")
			c, ok3 := proj.Lister().Get("default", "d")
			d, ok4 := dropped.Lister().Get("default", "d")
			return ok1 && ok2 && ok3 && ok4 && a.ResourceVersion == rv && b.GetResourceVersion() == rv && c.GetResourceVersion() == rv &&
				d.ResourceVersion == rv
		})
		d, _ := dropped.Lister().Get("default", "d")
		noMF := cur.DeepCopy()
		noMF.ManagedFields = nil
		if dj, wj := mustJSON(t, d), mustJSON(t, noMF); dj != wj {
			t.Errorf("update %d, informer without managedFields:\n got %s\nwant %s", i, dj, wj)
		}
		a, _ := typed.Lister().Get("default", "d")
		b, _ := unstr.Lister().Get("default", "d")
		c, _ := proj.Lister().Get("default", "d")
		am, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(a)
		for name, got := range map[string]map[string]any{"typed": am, "unstructured": b.Object} {
			if gotJSON, _ := json.Marshal(got); string(gotJSON) != string(wantJSON) {
				t.Errorf("update %d, %s informer:\n got %s\nwant %s", i, name, gotJSON, wantJSON)
			}
		}
		if gotJSON, _ := json.Marshal(c.Object); string(gotJSON) != string(projJSON) {
			t.Errorf("update %d, projected informer:\n got %s\nwant %s", i, gotJSON, projJSON)
		}
	}
	// Patches share the unchanged parts of the previous object: the
	// detector's copies of it and of the objects it replaced still hold.
	if err := unstr.CheckMutations(); err != nil {
		t.Error(err)
	}
	s := gatherInformers(t, reg)
	for _, name := range []string{"typed", "unstructured", "projected", "dropped"} {
		deltas := s.values[[3]string{"objwatch_informer_delta_events_total", name, ""}]
		failures := s.values[[3]string{"objwatch_informer_delta_failures_total", name, ""}]
		t.Logf("%s: %v delta events, %v failures (server offers %v)", name, deltas, failures, ext)
		if failures != 0 {
			t.Errorf("%s: %v delta failures", name, failures)
		}
		if ext.Has(client.ExtWatchDeltas) && deltas == 0 {
			t.Errorf("%s: the server offers deltas, the informer applied none", name)
		}
		if !ext.Has(client.ExtWatchDeltas) && deltas != 0 {
			t.Errorf("%s: %v delta events from a server without them", name, deltas)
		}
	}
}

// metricValue returns the value of the counter metric of the informer, with
// the type label typ if not "".
func metricValue(t *testing.T, g prometheus.Gatherer, metric, inf, typ string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["informer"] == inf && labels["type"] == typ {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s of informer %s", metric, inf)
	return 0
}

// TestMaskedDeltasAcrossCutsAndRelists: with mask, projection and deltas
// on the wire, an informer resumes after cut watches and relists after
// the server forgot its resourceVersion (410) without a patch failing, and
// delivers the same calls as the emulation; its cache ends equal to the
// projection of the objects.
func TestMaskedDeltasAcrossCutsAndRelists(t *testing.T) {
	e := startEnv(t, compacting(100*time.Millisecond)...)
	ctx := testContext(t, 90*time.Second)
	reg := prometheus.NewRegistry()
	mask := []string{"/data/watched"}
	var infs []*informer.SharedInformer[CM]
	var logs []*callLog[CM]
	for _, emulate := range []bool{false, true} {
		inf, cl := startMasked(t, client.NewClient[CM](e.reader, configMaps), "cuts", showCM, informer.Options[CM]{
			Name: fmt.Sprintf("emulated=%v", emulate), Metrics: reg, FieldMask: mask, Projection: true, Deltas: true,
			DisableServerExtensions: emulate, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
		infs, logs = append(infs, inf), append(logs, cl)
		waitFor(t, inf.Name()+" synced", inf.HasSynced)
	}
	names := []string{"a", "b", "c"}
	for _, n := range names {
		if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "default",
			Labels: map[string]string{"app": "cuts"}}, Data: map[string]string{"watched": "0", "other": strings.Repeat("o", 1000)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	step := 0
	var lastRV string
	write := func(rounds int) {
		t.Helper()
		for range rounds {
			step++
			n := names[step%len(names)]
			cur, err := e.writer.Get(ctx, "default", n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if step%3 == 0 {
				cur.Data["watched"] = fmt.Sprint(step)
			} else {
				cur.Data["other"] = fmt.Sprint(step)
			}
			up, err := e.writer.Update(ctx, cur, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lastRV = up.ResourceVersion
		}
	}
	caughtUp := func() {
		t.Helper()
		for _, inf := range infs {
			waitFor(t, inf.Name()+" to catch up", func() bool { return rvNumber(inf.LastResourceVersion()) >= rvNumber(lastRV) })
		}
	}
	write(10)
	e.cut.Cut(0) // resume at once, before the server forgets
	write(10)
	caughtUp()    // on a new watch, which the next cut ends
	e.cut.Cut(-1) // held back until the server forgot: relist
	write(10)
	forgotten := func(rv string) bool {
		w, err := e.writer.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return errors.Is(err, client.ErrGone)
		}
		defer w.Stop()
		_, _, err = w.NextRaw()
		return errors.Is(err, client.ErrGone)
	}
	for _, inf := range infs {
		rv := inf.LastResourceVersion()
		waitFor(t, "the server to forget "+rv, func() bool {
			write(1)
			time.Sleep(50 * time.Millisecond)
			return forgotten(rv)
		})
	}
	relists := func(inf *informer.SharedInformer[CM]) float64 {
		return metricValue(t, reg, "objwatch_informer_relists_total", inf.Name(), "")
	}
	before := []float64{relists(infs[0]), relists(infs[1])}
	e.cut.Release()
	// Both relist the same state: nothing is written until both have
	// (a write between the two relists would be collapsed into the
	// later one's update and seen as a change of its own by the other).
	for i, inf := range infs {
		waitFor(t, inf.Name()+" to relist", func() bool { return relists(inf) > before[i] })
	}
	caughtUp()
	write(10)
	if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "end", Namespace: "default",
		Labels: map[string]string{"app": "cuts"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, cl := range logs {
		waitFor(t, "the end", func() bool { return cl.has("add end ") })
	}
	// A relist collapses the changes it missed into one update, so the
	// calls compare only when both relisted alike (the resumption after
	// the first cut can, rarely, come too late for one of them).
	if a, b := logs[0].calls(), logs[1].calls(); relists(infs[0]) == relists(infs[1]) && !slices.Equal(a, b) {
		t.Errorf("server and emulated calls differ:\n%s\n---\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	m, err := fieldmask.Parse(mask...)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		cur, err := e.writer.Get(ctx, "default", n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		full, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(cur)
		want := m.Project(full)["data"]
		for _, inf := range infs {
			got, ok := inf.Lister().Get("default", n)
			if !ok || got.Data["watched"] != want.(map[string]any)["watched"] || len(got.Data) != 1 {
				t.Errorf("%s: %s is %v, want data %v", inf.Name(), n, got, want)
			}
		}
	}
	for _, inf := range infs {
		d := metricValue(t, reg, "objwatch_informer_delta_events_total", inf.Name(), "")
		f := metricValue(t, reg, "objwatch_informer_delta_failures_total", inf.Name(), "")
		r := metricValue(t, reg, "objwatch_informer_relists_total", inf.Name(), "")
		t.Logf("%s: %v delta events, %v failures, %v relists; %d cuts", inf.Name(), d, f, r, e.cut.Cuts.Load())
		if f != 0 {
			t.Errorf("%s: %v delta failures", inf.Name(), f)
		}
		if r == 0 {
			t.Errorf("%s: no relist", inf.Name())
		}
	}
}

// TestFieldMaskAgainstPlainServer: the same informer (mask, projection,
// deltas) against objwatch and against a server without the extensions
// (as kube-apiserver: /version does not list them) delivers the same
// calls for the same writes; against the latter it emulates them.
func TestFieldMaskAgainstPlainServer(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	rvs := regexp.MustCompile(`rv=\d+`)
	var calls [2][]string
	for i, plain := range []bool{false, true} {
		e := startEnv(t, testenv.WithServerConfig(func(c *server.Config) { c.WithoutWatchExtensions = plain }))
		ext, err := e.reader.WatchExtensions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(ext) > 0; got == plain {
			t.Fatalf("server without extensions %v offers %v", plain, ext)
		}
		reg := prometheus.NewRegistry()
		inf, cl := startMasked(t, client.NewClient[CM](e.reader, configMaps), "plain", showCM, informer.Options[CM]{
			Name: "masked", Metrics: reg, FieldMask: []string{"/data/watched"}, Projection: true, Deltas: true})
		waitFor(t, "sync", inf.HasSynced)
		maskWrites(t, ctx, e.writer, "plain")
		waitFor(t, "the end", func() bool { return cl.has("add end ") })
		for _, c := range cl.calls() {
			calls[i] = append(calls[i], rvs.ReplaceAllString(c, "rv=N"))
		}
		modified := metricValue(t, reg, "objwatch_informer_watch_events_total", "masked", "MODIFIED")
		deltas := metricValue(t, reg, "objwatch_informer_delta_events_total", "masked", "")
		t.Logf("plain=%v: %v MODIFIED received, %v delta events", plain, modified, deltas)
		if plain && (modified != 8 || deltas != 0) || !plain && (modified != 4 || deltas == 0) {
			t.Errorf("plain=%v: %v MODIFIED received, %v delta events", plain, modified, deltas)
		}
	}
	if !slices.Equal(calls[0], calls[1]) {
		t.Errorf("calls differ:\n%s\n---\n%s", strings.Join(calls[0], "\n"), strings.Join(calls[1], "\n"))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
