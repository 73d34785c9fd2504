package informer_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// countingTransport counts the response bytes of the requests it sends,
// and, with ignoreDrop, takes the drop parameter out of their Accept
// header, as a server that does not know it would ignore it.
type countingTransport struct {
	next       http.RoundTripper
	ignoreDrop bool
	bytes      atomic.Int64
	dropAsked  atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if a := req.Header.Get("Accept"); strings.Contains(a, "drop=metadata.managedFields") {
		c.dropAsked.Add(1)
		if c.ignoreDrop {
			req = req.Clone(req.Context())
			req.Header.Set("Accept", "application/json")
		}
	}
	resp, err := c.next.RoundTrip(req)
	if err == nil {
		resp.Body = &countingBody{resp.Body, &c.bytes}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestDropManagedFields: an informer with DropManagedFields asks the
// server to leave managedFields out (and gets fewer bytes) and caches and
// hands out objects without them, also from a server that sends them
// anyway; without it they are kept.
func TestDropManagedFields(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 60*time.Second)
	const n = 20
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("mf-%d", i), Namespace: "default", Labels: map[string]string{"app": "mf"}},
			Data: map[string]string{"k": strings.Repeat("v", 100)}}
		if _, err := e.writer.Create(ctx, cm, metav1.CreateOptions{FieldManager: "writer-one"}); err != nil {
			t.Fatal(err)
		}
	}
	start := func(drop, ignore bool) (*informer.SharedInformer[CM], *countingTransport) {
		cfg, err := client.FromKubeconfig(e.Kubeconfig, "")
		if err != nil {
			t.Fatal(err)
		}
		ct := &countingTransport{ignoreDrop: ignore}
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { ct.next = rt; return ct }
		rest, err := client.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rest.CloseIdleConnections)
		inf, err := informer.New(client.NewClient[CM](rest, configMaps), informer.Options[CM]{
			LabelSelector: "app=mf", DropManagedFields: drop, Name: fmt.Sprintf("drop=%v,ignore=%v", drop, ignore),
		})
		if err != nil {
			t.Fatal(err)
		}
		var handled atomic.Int64
		if _, err := inf.AddHandler(informer.HandlerFuncs[CM]{Update: func(old, cur CM) {
			if drop && cur.ManagedFields != nil {
				t.Errorf("update handed out managedFields: %v", cur.ManagedFields)
			}
			handled.Add(1)
		}}, informer.HandlerOptions{}); err != nil {
			t.Fatal(err)
		}
		run(t, inf)
		if err := inf.WaitForSync(ctx); err != nil {
			t.Fatal(err)
		}
		return inf, ct
	}
	full, fullT := start(false, false)
	dropped, dropT := start(true, false)
	ignored, ignT := start(true, true)

	// A change by a second manager after the initial lists: a watch event.
	cm, err := e.writer.Get(ctx, "default", "mf-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k2"] = "x"
	if _, err := e.writer.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "writer-two"}); err != nil {
		t.Fatal(err)
	}
	for _, inf := range []*informer.SharedInformer[CM]{full, dropped, ignored} {
		waitFor(t, inf.Name()+" sees the update", func() bool {
			o, ok := inf.Lister().Get("default", "mf-0")
			return ok && o.Data["k2"] == "x"
		})
	}
	for _, o := range full.Lister().List("", nil) {
		if len(o.ManagedFields) == 0 {
			t.Errorf("full informer: %s has no managedFields", o.Name)
		}
	}
	for _, inf := range []*informer.SharedInformer[CM]{dropped, ignored} {
		objs := inf.Lister().List("", nil)
		if len(objs) != n {
			t.Fatalf("%s: %d objects", inf.Name(), len(objs))
		}
		for _, o := range objs {
			if o.ManagedFields != nil {
				t.Errorf("%s: %s has managedFields", inf.Name(), o.Name)
			}
		}
	}
	if dropT.dropAsked.Load() == 0 || fullT.dropAsked.Load() != 0 {
		t.Errorf("drop asked: %d by the dropping informer, %d by the full one", dropT.dropAsked.Load(), fullT.dropAsked.Load())
	}
	if d, f := dropT.bytes.Load(), fullT.bytes.Load(); d >= f {
		t.Errorf("dropping informer read %d bytes, full %d", d, f)
	} else {
		t.Logf("informer read %d bytes with managedFields, %d without (%.0f%% saved); %d from a server ignoring the request", f, d, 100*(1-float64(d)/float64(f)), ignT.bytes.Load())
	}
}
