package client_test

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/testenv"
)

// TestWatchParams: WatchExtensions reads what the server offers (nothing
// from one without them); WithWatchParams projects lists and watches and
// asks for deltas, whose patch Event.Patch carries; a mask keeps updates
// of other fields off the watch.
func TestWatchParams(t *testing.T) {
	_, plain := start(t, testenv.WithServerConfig(func(c *server.Config) { c.WithoutWatchExtensions = true }))
	ctx := ctxFor(t)
	if ext, err := plain.WatchExtensions(ctx); err != nil || len(ext) != 0 {
		t.Errorf("WatchExtensions of a server without them = %v, %v", ext, err)
	}

	_, rc := start(t)
	ext, err := rc.WatchExtensions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{client.ExtFieldMask, client.ExtProjection, client.ExtWatchDeltas} {
		if !ext.Has(name) {
			t.Errorf("objwatch offers %v, not %s", ext, name)
		}
	}
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	cm, err := cms.Create(ctx, newCM("default", "p", map[string]string{"watched": "0", "other": strings.Repeat("o", 500)}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	masked := cms.WithWatchParams(client.WatchParams{FieldMask: []string{"/data/watched"}, Projection: true, Deltas: true})
	l, err := masked.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || len(l.Items[0].Data) != 1 || l.Items[0].Data["watched"] != "0" || l.Items[0].UID != cm.UID {
		t.Fatalf("projected list: %+v", l.Items)
	}
	w, err := masked.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cm.Data["other"] = "changed" // outside the mask
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm.Data["watched"] = "1"
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Next()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != client.Modified || ev.Object.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("first event %s rv %s, want MODIFIED rv %s (the update outside the mask sends nothing)", ev.Type, ev.Object.ResourceVersion, cm.ResourceVersion)
	}
	var patch []map[string]any
	if err := json.Unmarshal(ev.Patch, &patch); err != nil || len(patch) == 0 {
		t.Fatalf("delta event patch %s: %v", ev.Patch, err)
	}
	if ev.Object.Data != nil {
		t.Errorf("a delta event's object is its identity, not %v", ev.Object.Data)
	}
	if w.Patch() == nil || string(w.Patch()) != string(ev.Patch) {
		t.Errorf("Watcher.Patch = %s, Event.Patch %s", w.Patch(), ev.Patch)
	}
}
