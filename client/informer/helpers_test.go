package informer_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/internal/watchcut"
	"github.com/objwatch/objwatch/testenv"
)

var configMaps = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}

type CM = *corev1.ConfigMap

// env is a test server with a writer client and a cuttable reader client.
type env struct {
	*testenv.Env
	writer *client.Client[CM] // never cut
	admin  *client.REST       // the writer's
	reader *client.REST       // through the cutter
	cut    *watchcut.Cutter
	// cbor: the reader prefers CBOR (tests named TestCBOR..., or all
	// with OBJWATCH_TEST_CBOR=1); protobuf: the reader prefers protobuf
	// (tests named TestProtobuf..., or all with OBJWATCH_TEST_PROTOBUF=1);
	// readerTypes counts the Content-Types of the reader's list and watch
	// answers.
	cbor, protobuf bool
	typesMu        sync.Mutex
	readerTypes    map[string]int
}

// preferCBOR reports whether t's reader should prefer CBOR.
func preferCBOR(t *testing.T) bool {
	return strings.HasPrefix(t.Name(), "TestCBOR") || os.Getenv("OBJWATCH_TEST_CBOR") == "1"
}

// preferProtobuf reports whether t's reader should prefer protobuf.
func preferProtobuf(t *testing.T) bool {
	return strings.HasPrefix(t.Name(), "TestProtobuf") || os.Getenv("OBJWATCH_TEST_PROTOBUF") == "1"
}

// recordTypes wraps the reader's transport to count answer Content-Types.
func (e *env) recordTypes(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && req.Method == http.MethodGet {
			mt, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
			e.typesMu.Lock()
			e.readerTypes[mt]++
			e.typesMu.Unlock()
		}
		return resp, err
	})
}

// answerTypes returns the counts of the reader's answer Content-Types.
func (e *env) answerTypes() map[string]int {
	e.typesMu.Lock()
	defer e.typesMu.Unlock()
	return maps.Clone(e.readerTypes)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// compacting makes the server forget history fast: etcd compacts every
// interval and the watch cache keeps about that much history, so watches
// held back longer get 410 Gone.
func compacting(interval time.Duration) []testenv.Option {
	return []testenv.Option{testenv.WithHistory(interval)}
}

func startEnv(t *testing.T, opts ...testenv.Option) *env {
	opts = append([]testenv.Option{testenv.WithBookmarkInterval(300 * time.Millisecond)}, opts...)
	t.Helper()
	e := &env{Env: testenv.Start(t, opts...), cut: watchcut.New()}
	cfg, err := client.FromKubeconfig(e.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	wr, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wr.CloseIdleConnections)
	e.writer, e.admin = client.NewClient[CM](wr, configMaps), wr
	rcfg := *cfg
	e.cbor, e.readerTypes = preferCBOR(t), map[string]int{}
	rcfg.PreferCBOR = e.cbor
	e.protobuf = preferProtobuf(t)
	rcfg.PreferProtobuf = e.protobuf
	rcfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return e.cut.Wrap(e.recordTypes(rt)) }
	if e.reader, err = client.New(&rcfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.reader.CloseIdleConnections)
	return e
}

// bothModes runs test with a decoded cache and with a compact one
// (Options.Compact).
func bothModes(t *testing.T, test func(t *testing.T, compact bool)) {
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprintf("compact=%v", compact), func(t *testing.T) { test(t, compact) })
	}
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// run runs inf until the test ends and checks that Run returned.
func run(t *testing.T, inf interface{ Run(context.Context) error }) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run() = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return 30 s after its context ended")
		}
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(stop) })
	return func() { once.Do(stop) }
}

// state is one state of an object in a history: its resourceVersion and
// UID, or its deletion.
type state struct {
	rv      string
	uid     types.UID
	deleted bool
}

func (s state) String() string {
	if s.deleted {
		return "deleted"
	}
	return s.rv
}

func stateOf(o metav1.Object) state { return state{rv: o.GetResourceVersion(), uid: o.GetUID()} }

// history records the true sequence of states of each object, as written.
type history struct {
	mu     sync.Mutex
	states map[informer.Key][]state
}

func newHistory() *history { return &history{states: map[informer.Key][]state{}} }

func (h *history) add(k informer.Key, s state) {
	h.mu.Lock()
	h.states[k] = append(h.states[k], s)
	h.mu.Unlock()
}

// writer does random creates, updates and deletes of objects named
// key-0..key-<keys-1> in namespace ns, recording their history.
type writer struct {
	c      *client.Client[CM]
	hist   *history
	ns     string
	keys   int
	live   map[string]CM
	rnd    *rand.Rand
	writes int
}

func newWriter(c *client.Client[CM], hist *history, ns string, keys int, seed uint64) *writer {
	return &writer{c: c, hist: hist, ns: ns, keys: keys, live: map[string]CM{}, rnd: rand.New(rand.NewPCG(seed, 1))}
}

func (w *writer) step(ctx context.Context) error {
	name := fmt.Sprintf("key-%d", w.rnd.IntN(w.keys))
	k := informer.Key{Namespace: w.ns, Name: name}
	cur, ok := w.live[name]
	switch {
	case !ok:
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{"gen": "0"}},
			Data: map[string]string{"v": "0"}}
		out, err := w.c.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		w.live[name] = out
		w.hist.add(k, stateOf(out))
	case w.rnd.IntN(10) < 7:
		next := cur.DeepCopy()
		next.Data["v"] = fmt.Sprint(w.writes)
		next.Labels["gen"] = fmt.Sprint(w.rnd.IntN(3))
		out, err := w.c.Update(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update %s: %w", name, err)
		}
		w.live[name] = out
		w.hist.add(k, stateOf(out))
	default:
		if err := w.c.Delete(ctx, w.ns, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		delete(w.live, name)
		w.hist.add(k, state{deleted: true})
	}
	w.writes++
	return nil
}

// recorder is a handler that checks the notifications it gets against its
// own view of the objects (an add for a new key, an update from the state
// it has, a delete of what it has) and records each object's sequence of
// states.
type recorder struct {
	delay time.Duration // per notification, to make a slow handler
	// reference relaxes the checks for client-go, which turns a delete
	// and re-create it missed into one update and may repeat a state
	// (counted in noops).
	reference bool

	mu      sync.Mutex
	view    map[informer.Key]CM
	seq     map[informer.Key][]state
	errs    []string
	adds    int
	updates int
	deletes int
	unknown int
	noops   int
}

func newRecorder() *recorder {
	return &recorder{view: map[informer.Key]CM{}, seq: map[informer.Key][]state{}}
}

func (r *recorder) errorf(format string, args ...any) {
	if len(r.errs) < 20 {
		r.errs = append(r.errs, fmt.Sprintf(format, args...))
	}
}

func (r *recorder) OnAdd(obj CM, initial bool) {
	time.Sleep(r.delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	k := informer.KeyOf(obj)
	if old, ok := r.view[k]; ok {
		r.errorf("OnAdd(%s@%s) while holding %s", k, obj.ResourceVersion, old.ResourceVersion)
	}
	r.view[k] = obj
	r.seq[k] = append(r.seq[k], stateOf(obj))
	r.adds++
}

func (r *recorder) OnUpdate(old, new CM) {
	time.Sleep(r.delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	k := informer.KeyOf(new)
	cur, ok := r.view[k]
	switch {
	case !ok:
		r.errorf("OnUpdate(%s %s>%s) of an object not held", k, old.ResourceVersion, new.ResourceVersion)
	case cur.ResourceVersion != old.ResourceVersion:
		r.errorf("OnUpdate(%s %s>%s) while holding %s", k, old.ResourceVersion, new.ResourceVersion, cur.ResourceVersion)
	case old.UID != new.UID && !r.reference:
		r.errorf("OnUpdate(%s) across UIDs %s>%s", k, old.UID, new.UID)
	case old.ResourceVersion == new.ResourceVersion:
		if !r.reference {
			r.errorf("OnUpdate(%s %s>%s): no-op update", k, old.ResourceVersion, new.ResourceVersion)
		}
		r.noops++
		return
	}
	r.view[k] = new
	r.seq[k] = append(r.seq[k], stateOf(new))
	r.updates++
}

func (r *recorder) OnDelete(obj CM, unknown bool) {
	time.Sleep(r.delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	k := informer.KeyOf(obj)
	cur, ok := r.view[k]
	switch {
	case !ok:
		r.errorf("OnDelete(%s) of an object not held", k)
	case cur.UID != obj.UID && !r.reference:
		r.errorf("OnDelete(%s) of UID %s while holding %s", k, obj.UID, cur.UID)
	case unknown && rvNumber(obj.ResourceVersion) < rvNumber(cur.ResourceVersion):
		// A queue over its bound may merge a pending update into the
		// delete: the handler then gets the newest state, never an older.
		r.errorf("OnDelete(%s, unknown) with %s while holding %s", k, obj.ResourceVersion, cur.ResourceVersion)
	}
	delete(r.view, k)
	r.seq[k] = append(r.seq[k], state{deleted: true})
	r.deletes++
	if unknown {
		r.unknown++
	}
}

// rvs returns the recorder's view as key → resourceVersion.
func (r *recorder) rvs() map[informer.Key]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[informer.Key]string{}
	for k, o := range r.view {
		out[k] = o.ResourceVersion
	}
	return out
}

// check reports the recorder's protocol errors and checks that each
// object's sequence of states is a subsequence of its history. With
// complete, it must also contain every state after the first one seen.
//
// With complete, it first waits (up to 10 s) for the recorder to reach the
// end of every key's history: a waitConsistent before it cannot tell a
// handler that has not yet seen a last create and delete from one that
// saw both, since the key is absent either way.
func (r *recorder) check(t *testing.T, name string, hist *history, complete bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); complete && len(r.findings(hist, true)) > 0 && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	for _, f := range r.findings(hist, complete) {
		t.Errorf("%s: %s", name, f)
	}
}

// findings are what check reports: the handler's errors, and states it
// saw that are not in order in their key's history (or, with complete,
// not every state from the first it saw to the last).
func (r *recorder) findings(hist *history, complete bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	hist.mu.Lock()
	defer hist.mu.Unlock()
	out := slices.Clone(r.errs)
	for k, seq := range r.seq {
		h := hist.states[k]
		j, first := 0, -1
		for _, s := range seq {
			for j < len(h) && !(h[j].deleted == s.deleted && (s.deleted || h[j].rv == s.rv && h[j].uid == s.uid)) {
				j++
			}
			if j == len(h) {
				out = append(out, fmt.Sprintf("%s saw %v, not a subsequence of its history %v", k, seq, h))
				break
			}
			if first < 0 {
				first = j
			}
			j++
		}
		if complete && first >= 0 && !slices.Equal(seq, h[first:first+len(seq)]) || complete && first >= 0 && first+len(seq) != len(h) {
			out = append(out, fmt.Sprintf("%s saw %v, want every state from the first: %v", k, seq, h[first:]))
		}
	}
	return out
}

// listRVs returns a fresh LIST as key → resourceVersion.
func listRVs(ctx context.Context, c *client.Client[CM], ns string) (map[informer.Key]string, error) {
	l, err := c.List(ctx, ns, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[informer.Key]string{}
	for _, o := range l.Items {
		out[informer.KeyOf(o)] = o.ResourceVersion
	}
	return out, nil
}

func listerRVs(l informer.Lister[CM]) map[informer.Key]string {
	out := map[informer.Key]string{}
	for _, o := range l.List("", nil) {
		out[informer.KeyOf(o)] = o.ResourceVersion
	}
	return out
}

// waitConsistent waits until every view equals a fresh LIST.
func waitConsistent(t *testing.T, c *client.Client[CM], ns string, views map[string]func() map[informer.Key]string) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	want, err := listRVs(ctx, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	for name, view := range views {
		for {
			got := view()
			if maps.Equal(got, want) {
				break
			}
			if ctx.Err() != nil {
				var missing, extra, stale []string
				for k, rv := range want {
					if g, ok := got[k]; !ok {
						missing = append(missing, k.String())
					} else if g != rv {
						stale = append(stale, fmt.Sprintf("%s@%s(want %s)", k, g, rv))
					}
				}
				for k := range got {
					if _, ok := want[k]; !ok {
						extra = append(extra, k.String())
					}
				}
				t.Errorf("%s differs from a fresh LIST: missing %v, extra (missed deletes) %v, stale %v", name, missing, extra, stale)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// rvNumber is a resourceVersion as the number it is on objwatch (an etcd
// revision); -1 if it is not one.
func rvNumber(rv string) int64 {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		return -1
	}
	return n
}
