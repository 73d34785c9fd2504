package informer_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/client/recording"
)

// playLog logs handler calls as text, one line each, for comparisons.
type playLog struct {
	mu    sync.Mutex
	calls []string
	view  map[informer.Key]string
}

func newPlayLog() *playLog { return &playLog{view: map[informer.Key]string{}} }

func (l *playLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *playLog) OnAdd(o CM, initial bool) {
	l.mu.Lock()
	l.view[informer.KeyOf(o)] = o.ResourceVersion
	l.mu.Unlock()
	l.add(fmt.Sprintf("add %s/%s@%s uid=%s initial=%v data=%v", o.Namespace, o.Name, o.ResourceVersion, o.UID, initial, o.Data))
}

func (l *playLog) OnUpdate(old, o CM) {
	l.mu.Lock()
	l.view[informer.KeyOf(o)] = o.ResourceVersion
	l.mu.Unlock()
	l.add(fmt.Sprintf("update %s/%s@%s>%s data=%v", o.Namespace, o.Name, old.ResourceVersion, o.ResourceVersion, o.Data))
}

func (l *playLog) OnDelete(o CM, unknown bool) {
	l.mu.Lock()
	delete(l.view, informer.KeyOf(o))
	l.mu.Unlock()
	l.add(fmt.Sprintf("delete %s/%s@%s unknown=%v", o.Namespace, o.Name, o.ResourceVersion, unknown))
}

func (l *playLog) rvs() map[informer.Key]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[informer.Key]string{}
	for k, v := range l.view {
		out[k] = v
	}
	return out
}

func (l *playLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

// TestRecordReplaysIdentically records a live informer while the test
// creates, updates and deletes ConfigMaps, cuts its watch until the server
// compacted past it (410, relist), and plays the recording into a handler:
// the calls must be those the live informer made, in the same order.
func TestRecordReplaysIdentically(t *testing.T) {
	e := startEnv(t, compacting(100*time.Millisecond)...)
	ctx := testContext(t, 60*time.Second)
	create := func(name, v string) {
		t.Helper()
		if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Data: map[string]string{"v": v}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update := func(name, v string) {
		t.Helper()
		cm, err := e.writer.Get(ctx, "default", name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"v": v}
		if _, err := e.writer.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(name string) {
		t.Helper()
		if err := e.writer.Delete(ctx, "default", name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		create(fmt.Sprint("cm", i), "0")
	}
	reg := prometheus.NewRegistry()
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{
		Metrics: reg, Name: "cms", InitialBackoff: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	live := newPlayLog()
	liveReg, err := inf.AddHandler(live, informer.HandlerOptions{Name: "live"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{"v1/configmaps"}, Server: e.Config.Host}, recording.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := informer.Record(inf, w)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	update("cm1", "1")
	del("cm2")
	create("new0", "0")
	update("cm1", "2")
	waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{"live": live.rvs})

	// Cut the watch until the server forgot its resourceVersion: the
	// informer relists and infers what it missed.
	e.cut.Cut(1500 * time.Millisecond)
	update("cm3", "1")
	update("cm3", "2") // the relist sees only the last state
	del("cm4")
	del("cm5")
	create("cm5", "re") // re-created: a new UID
	create("new1", "0")
	waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{"live": live.rvs})
	update("new1", "1")
	del("cm0")
	waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{"live": live.rvs})
	for rec.Backlog() > 0 || liveReg.Backlog() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if lists := counter(t, reg, "objwatch_informer_lists_total"); lists != 2 {
		t.Errorf("lists = %v, want 2 (initial and one relist after 410)", lists)
	}
	stop()
	<-rec.Done()
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	size := buf.Len()
	r, err := recording.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// The 410 is in the recording, once, before the relist's effects
	// (the deletions it inferred).
	gone, firstUnknown := -1, -1
	for i, it := range r.Items {
		switch {
		case it.Kind == recording.Gone && gone >= 0:
			t.Errorf("items %d and %d are both gone lines; the informer relisted once", gone, i)
		case it.Kind == recording.Gone:
			gone = i
			if it.ResourceVersion == "" {
				t.Error("the gone line names no resourceVersion")
			}
		case it.Unknown && firstUnknown < 0:
			firstUnknown = i
		}
	}
	if gone < 0 || firstUnknown < 0 || gone > firstUnknown {
		t.Errorf("gone line at item %d, first inferred deletion at %d: want the 410 recorded before the relist's effects", gone, firstUnknown)
	}
	player, err := recording.NewPlayer[CM](r, "v1/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	replayed := newPlayLog()
	player.AddHandler(replayed)
	if err := player.Run(); err != nil {
		t.Fatal(err)
	}
	want, got := live.snapshot(), replayed.snapshot()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("replayed calls differ from the live informer's:\nlive:\n%s\nreplayed:\n%s", lines(want), lines(got))
	}
	unknown := 0
	for _, c := range got {
		if bytes.Contains([]byte(c), []byte("unknown=true")) {
			unknown++
		}
	}
	if unknown != 2 { // cm4 gone, cm5 re-created
		t.Errorf("%d deletes with unknown final state, want 2 (the relist's):\n%s", unknown, lines(got))
	}
	t.Logf("%d calls, %d items, recording %d bytes", len(got), len(r.Items), size)
}

func lines(ss []string) string {
	var b bytes.Buffer
	for _, s := range ss {
		b.WriteString("  " + s + "\n")
	}
	return b.String()
}

// TestCaptureMatchesInformer records the wire (recording.Capture: lists,
// watch events, the 410 and the relist) beside a live informer reading the
// same server through the same cut connection, and plays the recording:
// the player must make the calls the informer made, in the same order.
func TestCaptureMatchesInformer(t *testing.T) {
	e := startEnv(t, compacting(100*time.Millisecond)...)
	ctx := testContext(t, 60*time.Second)
	write := func(name, v string, del bool) {
		t.Helper()
		var err error
		switch cm, gerr := e.writer.Get(ctx, "default", name, metav1.GetOptions{}); {
		case del:
			err = e.writer.Delete(ctx, "default", name, metav1.DeleteOptions{})
		case gerr != nil:
			_, err = e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: map[string]string{"v": v}}, metav1.CreateOptions{})
		default:
			cm.Data = map[string]string{"v": v}
			_, err = e.writer.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		write(fmt.Sprint("cm", i), "0", false)
	}
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Name: "cms", InitialBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	live := newPlayLog()
	liveReg, err := inf.AddHandler(live, informer.HandlerOptions{Name: "live"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	last := make(chan struct{})  // new's deletion was recorded
	added := make(chan struct{}) // new's creation was recorded
	bookmarks := make(chan struct{}, 1)
	// watching waits until the capture's watch is up (a bookmark came):
	// with history kept for 100 ms, a watch started later than that after
	// its list would get 410 Gone, and the capture and the informer would
	// then see different histories.
	watching := func() {
		t.Helper()
		select {
		case <-bookmarks: // an old one
		default:
		}
		select {
		case <-bookmarks:
		case <-ctx.Done():
			t.Fatal("no bookmark")
		}
	}
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{"v1/configmaps"}}, recording.Options{
		Written: func(it recording.Item) {
			if it.Kind == recording.Bookmark {
				select {
				case bookmarks <- struct{}{}:
				default:
				}
			}
			if it.Kind == recording.Deleted && bytes.Contains(it.Object, []byte(`"name":"new"`)) {
				close(last)
			}
			if it.Kind == recording.Added && bytes.Contains(it.Object, []byte(`"name":"new"`)) {
				close(added)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	var lists atomic.Int32
	relisted := make(chan struct{}) // the initial list and a relist were recorded
	synced := func() {
		if lists.Add(1) == 2 {
			close(relisted)
		}
	}
	cctx, stopCapture := context.WithCancel(ctx)
	captured := make(chan error, 1)
	go func() {
		captured <- recording.Capture(cctx, client.NewUnstructured(e.reader, configMaps), w, recording.CaptureOptions{
			Namespace: "default", Retry: 10 * time.Millisecond, Synced: synced, Failed: func(err error) { t.Logf("capture: %v", err) }})
	}()
	stop := run(t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	watching()
	write("cm1", "1", false)
	write("cm2", "", true)
	write("new", "0", false)
	waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{"live": live.rvs})
	// The capture too has every write before the cut: one that lags
	// (under -race) would learn of cm2's deletion from its relist instead,
	// a different history from the informer's.
	select {
	case <-added:
	case <-ctx.Done():
		t.Fatal("the capture never recorded new's creation")
	}

	e.cut.Cut(1500 * time.Millisecond)
	write("cm3", "1", false)
	write("cm3", "2", false)
	write("cm4", "", true)
	write("cm0", "", true)
	write("cm0", "re", false)
	select {
	case <-relisted:
	case <-ctx.Done():
		t.Fatal("the capture did not relist")
	}
	waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{"live": live.rvs})
	watching()
	write("cm1", "2", false)
	write("new", "", true)
	waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{"live": live.rvs})
	select {
	case <-last:
	case <-ctx.Done():
		t.Fatal("the capture never recorded the last write")
	}
	for liveReg.Backlog() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	stopCapture()
	if err := <-captured; err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := recording.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var gone bool
	var kinds []string
	for _, it := range r.Items {
		gone = gone || it.Kind == recording.Gone
		kinds = append(kinds, fmt.Sprintf("%v:%s", it.At.Round(time.Millisecond), it.Kind))
	}
	t.Logf("recorded %v", kinds)
	if !gone {
		t.Error("the capture recorded no 410")
	}
	p, err := recording.NewPlayer[CM](r, "v1/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	replayed := newPlayLog()
	p.AddHandler(replayed)
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	if want, got := live.snapshot(), replayed.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the player's calls differ from the live informer's:\nlive:\n%s\nplayed:\n%s", lines(want), lines(got))
	}
}
