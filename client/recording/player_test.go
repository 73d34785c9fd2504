package recording_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/client/recording"
)

// calls logs a Player's handler calls.
type calls struct {
	log []string
	at  func() time.Duration
}

func (c *calls) OnAdd(o *corev1.ConfigMap, initial bool) {
	c.log = append(c.log, fmt.Sprintf("%v add %s@%s initial=%v", c.at(), o.Name, o.ResourceVersion, initial))
}
func (c *calls) OnUpdate(old, o *corev1.ConfigMap) {
	c.log = append(c.log, fmt.Sprintf("%v update %s@%s>%s", c.at(), o.Name, old.ResourceVersion, o.ResourceVersion))
}
func (c *calls) OnDelete(o *corev1.ConfigMap, unknown bool) {
	c.log = append(c.log, fmt.Sprintf("%v delete %s@%s unknown=%v", c.at(), o.Name, o.ResourceVersion, unknown))
}

// script writes a recording: each step is "kind name rv" at 1 s steps.
func script(t testing.TB, steps ...string) *recording.Recording {
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{cms}}, recording.Options{Now: fakeClock(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		f := strings.Fields(s)
		kind := recording.Kind(f[0])
		switch {
		case len(f) == 1:
			must(t, w.Marker(kind, cms, ""))
		case f[0] == "unknown":
			must(t, w.DeletedUnknown(cms, cm(f[1], f[2], nil)))
		default:
			o := cm(f[1], f[2], nil)
			if len(f) > 3 {
				o.UID = "other"
			}
			must(t, w.Object(kind, cms, o))
		}
	}
	must(t, w.Close())
	rec, err := recording.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func play(t *testing.T, rec *recording.Recording, setup func(p *recording.Player[*corev1.ConfigMap])) []string {
	t.Helper()
	p, err := recording.NewPlayer[*corev1.ConfigMap](rec, cms)
	if err != nil {
		t.Fatal(err)
	}
	c := &calls{at: p.Now}
	p.AddHandler(c)
	if setup != nil {
		setup(p)
	}
	start := time.Now()
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("playing took %v: the clock is not virtual", d)
	}
	if !p.Done() {
		t.Error("not done after Run")
	}
	return c.log
}

func check(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

var incident = []string{
	"initial a 1", "initial b 1", "initial c 1", "synced",
	"MODIFIED a 2", // 3s
	"MODIFIED a 3", // 4s
	"DELETED b 4",  // 5s
	"ADDED d 5",    // 6s
	"MODIFIED a 3", // 7s: a state the cache has
	"DELETED c 6",  // 8s
	"ADDED c 7 x",  // 9s: re-created, new UID
	"BOOKMARK a 8", // 10s
}

func TestPlayerCalls(t *testing.T) {
	check(t, play(t, script(t, incident...), nil),
		"1s add a@1 initial=true", "2s add b@1 initial=true", "3s add c@1 initial=true",
		"5s update a@1>2", "6s update a@2>3", "7s delete b@4 unknown=false", "8s add d@5 initial=false",
		"10s delete c@6 unknown=false", "11s add c@7 initial=false")
}

func TestPlayerRecordedRelist(t *testing.T) {
	rec := script(t, "initial a 1", "initial b 1", "initial c 1", "synced",
		"gone", "relist", "listed a 1", "listed b 5", "listed c 6 x", "listed d 6", "synced", "MODIFIED d 7")
	check(t, play(t, rec, nil),
		"1s add a@1 initial=true", "2s add b@1 initial=true", "3s add c@1 initial=true",
		"11s update b@1>5", "11s delete c@1 unknown=true", "11s add c@6 initial=false", "11s add d@6 initial=false",
		"12s update d@6>7")
}

func TestPlayerDisconnect(t *testing.T) {
	rec := script(t, incident...)
	// A plain disconnect from 5.5s to 9.5s: the watch resumes and gets
	// every event it missed, at 9.5s.
	check(t, play(t, rec, func(p *recording.Player[*corev1.ConfigMap]) {
		must(t, p.Disconnect(5500*time.Millisecond, 4*time.Second, false))
	}),
		"1s add a@1 initial=true", "2s add b@1 initial=true", "3s add c@1 initial=true",
		"5s update a@1>2",
		"9.5s update a@2>3", "9.5s delete b@4 unknown=false", "9.5s add d@5 initial=false",
		"10s delete c@6 unknown=false", "11s add c@7 initial=false")
	// The same with a 410 and back at 10.5s: the relist skips a's
	// intermediate state, and infers b's and c's deletions (final state
	// unknown: the last one the handler saw).
	check(t, play(t, rec, func(p *recording.Player[*corev1.ConfigMap]) {
		must(t, p.Disconnect(5500*time.Millisecond, 5*time.Second, true))
	}),
		"1s add a@1 initial=true", "2s add b@1 initial=true", "3s add c@1 initial=true",
		"5s update a@1>2",
		"10.5s update a@2>3", "10.5s add d@5 initial=false", "10.5s delete b@1 unknown=true", "10.5s delete c@1 unknown=true",
		"11s add c@7 initial=false")
	if _, err := recording.NewPlayer[*corev1.ConfigMap](rec, "v1/secrets"); err == nil {
		t.Error("a player of a resource the recording lacks")
	}
}

func TestPlayerOutageOverlap(t *testing.T) {
	p, err := recording.NewPlayer[*corev1.ConfigMap](script(t, incident...), cms)
	if err != nil {
		t.Fatal(err)
	}
	must(t, p.Disconnect(2*time.Second, 2*time.Second, false))
	if err := p.Disconnect(3*time.Second, time.Second, true); err == nil {
		t.Error("overlapping outages accepted")
	}
	must(t, p.RunUntil(7*time.Second))
	if p.Now() != 7*time.Second {
		t.Errorf("Now = %v after RunUntil(7s)", p.Now())
	}
	if _, ok := p.Get("default", "b"); ok {
		t.Error("b still cached at 7s")
	}
	if err := p.Disconnect(time.Second, time.Second, false); err == nil {
		t.Error("an outage in the past accepted")
	}
}

func TestInterleave(t *testing.T) {
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{cms, "v1/secrets"}}, recording.Options{Now: fakeClock(time.Second), IncludeSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	secret := func(name, rv string) *corev1.Secret {
		s := &corev1.Secret{}
		s.APIVersion, s.Kind, s.Namespace, s.Name, s.ResourceVersion, s.UID = "v1", "Secret", "default", name, rv, "u"
		return s
	}
	must(t, w.Object(recording.Added, cms, cm("a", "1", nil)))
	must(t, w.Object(recording.Added, "v1/secrets", secret("s", "2")))
	must(t, w.Object(recording.Modified, cms, cm("a", "3", nil)))
	must(t, w.Object(recording.Deleted, "v1/secrets", secret("s", "4")))
	must(t, w.Close())
	rec, err := recording.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var log []string
	pc, err := recording.NewPlayer[*corev1.ConfigMap](rec, cms)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := recording.NewPlayer[*corev1.Secret](rec, "v1/secrets")
	if err != nil {
		t.Fatal(err)
	}
	pc.AddHandler(&calls{at: func() time.Duration { return pc.Now() }})
	pc.AddHandler(logHandler[*corev1.ConfigMap]{&log, "cm"})
	ps.AddHandler(logHandler[*corev1.Secret]{&log, "secret"})
	must(t, recording.Interleave(pc, ps))
	check(t, log, "cm add a@1", "secret add s@2", "cm update a@3", "secret delete s@4")
}

type logHandler[T interface {
	GetName() string
	GetResourceVersion() string
}] struct {
	log  *[]string
	name string
}

func (h logHandler[T]) OnAdd(o T, _ bool) {
	*h.log = append(*h.log, fmt.Sprintf("%s add %s@%s", h.name, o.GetName(), o.GetResourceVersion()))
}
func (h logHandler[T]) OnUpdate(_, o T) {
	*h.log = append(*h.log, fmt.Sprintf("%s update %s@%s", h.name, o.GetName(), o.GetResourceVersion()))
}
func (h logHandler[T]) OnDelete(o T, _ bool) {
	*h.log = append(*h.log, fmt.Sprintf("%s delete %s@%s", h.name, o.GetName(), o.GetResourceVersion()))
}

// TestPlayerOutageAcrossRecordedRelist: a recorded relist that starts
// during an injected outage is delivered at its end (gone false) or
// replaced by the player's own relist (gone true); either way handlers
// end with the recorded state.
func TestPlayerOutageAcrossRecordedRelist(t *testing.T) {
	rec := script(t, "initial a 1", "initial b 1", "synced", // 1-3s
		"gone", "relist", "listed a 2", "synced", // 4-7s
		"ADDED c 8") // 8s
	for _, gone := range []bool{false, true} {
		for _, window := range [][2]time.Duration{{5500 * time.Millisecond, time.Second}, {3500 * time.Millisecond, 4 * time.Second}, {6500 * time.Millisecond, 3 * time.Second}} {
			p, err := recording.NewPlayer[*corev1.ConfigMap](rec, cms)
			if err != nil {
				t.Fatal(err)
			}
			c := &calls{at: p.Now}
			p.AddHandler(c)
			must(t, p.Disconnect(window[0], window[1], gone))
			must(t, p.Run())
			var names []string
			for _, o := range p.List() {
				names = append(names, o.Name+"@"+o.ResourceVersion)
			}
			if got := strings.Join(names, " "); got != "a@2 c@8" {
				t.Errorf("gone=%v outage %v: cache %s, want a@2 c@8; calls:\n  %s", gone, window, got, strings.Join(c.log, "\n  "))
			}
		}
	}
}

// TestPlayerUnstructured plays objects without apiVersion and kind (as a
// typed informer may record them) into unstructured handlers.
func TestPlayerUnstructured(t *testing.T) {
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{cms}}, recording.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.Object(recording.Added, cms, map[string]any{"metadata": map[string]any{"name": "a", "namespace": "default", "resourceVersion": "1"}, "data": map[string]any{"n": 1}}))
	must(t, w.Close())
	rec, err := recording.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	p, err := recording.NewPlayer[*unstructured.Unstructured](rec, cms)
	if err != nil {
		t.Fatal(err)
	}
	must(t, p.Run())
	if o, ok := p.Get("default", "a"); !ok || o.Object["data"].(map[string]any)["n"] != int64(1) {
		t.Errorf("Get(a) = %v, %v", o, ok)
	}
}

// TestSecretsByResource: objects of v1/secrets are left out even when they
// do not say their kind.
func TestSecretsByResource(t *testing.T) {
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{"v1/secrets"}}, recording.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.Object(recording.Added, "v1/secrets", &corev1.Secret{Data: map[string][]byte{"pw": []byte("x")}}))
	if w.Items() != 0 || w.Skipped() != 1 {
		t.Errorf("items %d, skipped %d; want the Secret left out", w.Items(), w.Skipped())
	}
	must(t, w.Close())
}
