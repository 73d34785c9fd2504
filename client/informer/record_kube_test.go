package informer_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/client/recording"
	"github.com/objwatch/objwatch/testenv"
)

// TestRecordKube: against Kubernetes itself, a recording made from a live
// informer (informer.Record) and one of the wire (recording.Capture) both
// play into the calls the informer made, and the wire recording replayed
// into a fresh objwatch server leaves the namespace as Kubernetes has it.
// Skipped when no reference kube-apiserver runs (see kubeREST).
func TestRecordKube(t *testing.T) {
	admin := kubeREST(t, "admin")
	ctx := testContext(t, 60*time.Second)
	ns := "ow-rec-" + strings.ToLower(rand.Text()[:6]) // the kit deletes no namespaces
	startTenancy(t, admin, "admin", ns)
	cms := client.NewClient[CM](admin, configMaps)
	write := func(name, v string, del bool) {
		t.Helper()
		var err error
		switch cm, gerr := cms.Get(ctx, ns, name, metav1.GetOptions{}); {
		case del:
			err = cms.Delete(ctx, ns, name, metav1.DeleteOptions{})
		case gerr != nil:
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": v}}, metav1.CreateOptions{})
		default:
			cm.Data = map[string]string{"v": v}
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	write("a", "0", false)
	write("b", "0", false)

	inf, err := informer.New(cms, informer.Options[CM]{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	live := newPlayLog()
	liveReg, err := inf.AddHandler(live, informer.HandlerOptions{Name: "live"})
	if err != nil {
		t.Fatal(err)
	}
	header := recording.Header{Resources: []string{"v1/configmaps"}, Namespace: ns}
	var fromInformer, fromWire bytes.Buffer
	wi, err := recording.NewWriter(&fromInformer, header, recording.Options{})
	if err != nil {
		t.Fatal(err)
	}
	last := make(chan struct{})
	ww, err := recording.NewWriter(&fromWire, header, recording.Options{Written: func(it recording.Item) {
		if it.Kind == recording.Added && bytes.Contains(it.Object, []byte(`"name":"last"`)) {
			close(last)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := informer.Record(inf, wi)
	if err != nil {
		t.Fatal(err)
	}
	synced := make(chan struct{})
	cctx, stopCapture := context.WithCancel(ctx)
	captured := make(chan error, 1)
	go func() {
		captured <- recording.Capture(cctx, client.NewUnstructured(admin, configMaps), ww, recording.CaptureOptions{
			Namespace: ns, Synced: func() { close(synced) }})
	}()
	stop := run(t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	<-synced
	time.Sleep(200 * time.Millisecond) // the capture's watch is up
	write("a", "1", false)
	write("b", "", true)
	write("c", "0", false)
	write("a", "2", false)
	write("c", "", true)
	write("c", "again", false) // a new UID
	write("last", "0", false)
	select {
	case <-last:
	case <-ctx.Done():
		t.Fatal("the capture never recorded the last write")
	}
	waitConsistent(t, cms, ns, map[string]func() map[informer.Key]string{"live": live.rvs})
	for rec.Backlog() > 0 || liveReg.Backlog() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-rec.Done()
	stopCapture()
	if err := <-captured; err != nil {
		t.Fatal(err)
	}
	for _, w := range []*recording.Writer{wi, ww} {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := live.snapshot()
	var wire *recording.Recording
	for name, buf := range map[string]*bytes.Buffer{"informer.Record": &fromInformer, "Capture": &fromWire} {
		r, err := recording.ReadAll(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "Capture" {
			wire = r
		}
		p, err := recording.NewPlayer[CM](r, "v1/configmaps")
		if err != nil {
			t.Fatal(err)
		}
		played := newPlayLog()
		p.AddHandler(played)
		if err := p.Run(); err != nil {
			t.Fatal(err)
		}
		if got := played.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s played into calls other than the informer's:\nlive:\n%s\nplayed:\n%s", name, lines(want), lines(got))
		}
	}

	// Into a fresh objwatch server.
	env := testenv.Start(t)
	cfg := env.Config.ClientConfig()
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseIdleConnections()
	if _, err := recording.Replay(ctx, rc, wire, recording.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := listData(ctx, client.NewClient[CM](rc, configMaps), ns)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := listData(ctx, cms, ns)
	if err != nil {
		t.Fatal(err)
	}
	if got != kube {
		t.Errorf("replayed into objwatch: %s, want Kubernetes' %s", got, kube)
	}
}

// listData lists ns's ConfigMaps as "name=data ..." (kube-root-ca.crt
// left out: each server makes its own).
func listData(ctx context.Context, c *client.Client[CM], ns string) (string, error) {
	l, err := c.List(ctx, ns, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var out []string
	for _, o := range l.Items {
		if o.Name != "kube-root-ca.crt" {
			out = append(out, fmt.Sprintf("%s=%v", o.Name, o.Data))
		}
	}
	return strings.Join(out, " "), nil
}
