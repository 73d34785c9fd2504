package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/recording"
	"github.com/objwatch/objwatch/testenv"
)

// recordIncident records, on a server without the operator, a burst of
// user writes to ConfigSets: web created and then scaled and edited four
// times in a row, and api created and deleted right away.
func recordIncident(t *testing.T) *recording.Recording {
	t.Helper()
	env := testenv.Start(t)
	a := newAPI(t, env.Kubeconfig, nil)
	ctx := testContext(t)
	if err := installCRD(ctx, a.rest); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{recording.ResourceName(configSets.GVR)}, Server: env.Config.Host}, recording.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	synced := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- recording.Capture(cctx, client.NewUnstructured(a.rest, configSets), w, recording.CaptureOptions{
			Namespace: "default", Synced: func() { close(synced) }})
	}()
	<-synced
	if _, err := a.sets.Create(ctx, newSet("default", "web", 3, map[string]string{"color": "blue"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{`{"replicas":5}`, `{"replicas":1}`, `{"template":{"data":{"color":"green"}}}`, `{"replicas":2}`} {
		a.patchSpec(t, "default", "web", spec)
	}
	if _, err := a.sets.Create(ctx, newSet("default", "api", 2, map[string]string{"color": "red"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.sets.Delete(ctx, "default", "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	const writes = 1 + 1 + 4 + 1 + 1 // synced, web and its edits, api's create and delete
	for w.Items() < writes && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rec, err := recording.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestReplayIncident replays a recorded incident into a fresh server
// running the operator, as fast as the server takes it: the operator must
// end with web at its last spec (2 ConfigMaps, green) and nothing of api,
// whose deletion raced the operator's first reconcile.
func TestReplayIncident(t *testing.T) {
	rec := recordIncident(t)

	// Without a server: what an informer of ConfigSets is told.
	p, err := recording.NewPlayer[*ConfigSet](rec, recording.ResourceName(configSets.GVR))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	p.AddHandler(handlerFuncs{
		add:    func(s *ConfigSet) { seen = append(seen, fmt.Sprintf("add %s %d", s.Name, s.Spec.Replicas)) },
		update: func(s *ConfigSet) { seen = append(seen, fmt.Sprintf("update %s %d", s.Name, s.Spec.Replicas)) },
		del:    func(s *ConfigSet) { seen = append(seen, "delete "+s.Name) },
	})
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(seen), "[add web 3 update web 5 update web 1 update web 1 update web 2 add api 2 delete api]"; got != want {
		t.Errorf("informer calls %s, want %s", got, want)
	}

	// Into a server with the operator.
	env := testenv.Start(t)
	a := newAPI(t, env.Kubeconfig, nil)
	operator(t, a.rest, options{})
	st, err := recording.Replay(testContext(t), a.rest, rec, recording.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Creates != 2 || st.Updates != 4 || st.Deletes != 1 {
		t.Errorf("replay wrote %+v, want 2 creates, 4 updates, 1 delete", st)
	}
	set := a.waitConverged(t, "default", "web")
	if set.Spec.Replicas != 2 || set.Spec.Template.Data["color"] != "green" {
		t.Errorf("web spec %+v, want the last recorded one", set.Spec)
	}
	a.waitGone(t, "default", "api")
	l, err := a.cms.List(testContext(t), "default", metav1.ListOptions{LabelSelector: labels.Set{setLabel: "web"}.String()})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range l.Items {
		names = append(names, cm.Name)
		if !maps.Equal(cm.Data, map[string]string{"color": "green"}) {
			t.Errorf("%s data %v", cm.Name, cm.Data)
		}
	}
	if fmt.Sprint(names) != "[web-0 web-1]" {
		t.Errorf("web's ConfigMaps %v, want web-0 web-1", names)
	}
}

type handlerFuncs struct{ add, update, del func(*ConfigSet) }

func (h handlerFuncs) OnAdd(s *ConfigSet, _ bool)    { h.add(s) }
func (h handlerFuncs) OnUpdate(_, s *ConfigSet)      { h.update(s) }
func (h handlerFuncs) OnDelete(s *ConfigSet, _ bool) { h.del(s) }
