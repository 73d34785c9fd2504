package e2e_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/objwatch/objwatch/testenv"
)

// TestControllerRuntimeEventRecorder: the event recorder controller-runtime
// recommends (mgr.GetEventRecorder, client-go's events.k8s.io library)
// records an event, which reads back through events.k8s.io/v1 and core/v1.
func TestControllerRuntimeEventRecorder(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	env := testenv.Start(t)
	cs := typedClient(t, env)
	ctx := t.Context()
	cm := createConfigMap(ctx, t, cs, "default", "recorded", nil, map[string]string{"a": "b"})

	mgr, err := manager.New(restConfig(t, env), manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatalf("manager.New() = %v", err)
	}
	rec := mgr.GetEventRecorder("objwatch-e2e")
	mgr.Add(manager.RunnableFunc(func(context.Context) error {
		rec.Eventf(cm, nil, corev1.EventTypeNormal, "Checked", "Check", "configmap %s looks fine", cm.Name)
		return nil
	}))
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		// As controller-runtime's own tests do: the broadcaster must have
		// started before it is shut down, or its goroutines leak.
		time.Sleep(3 * time.Second)
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("manager.Start() = %v", err)
		}
	}()

	var ev *eventsv1.Event
	poll(ctx, t, "the recorded event through events.k8s.io/v1", func(ctx context.Context) (bool, error) {
		l, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("regarding.name", cm.Name).String()})
		if err != nil {
			return false, err
		}
		for i := range l.Items {
			if l.Items[i].Reason == "Checked" {
				ev = &l.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if ev.ReportingController != "objwatch-e2e" || ev.Action != "Check" || ev.Note != "configmap recorded looks fine" ||
		ev.Regarding.UID != cm.UID || ev.Regarding.Kind != "ConfigMap" || ev.Type != corev1.EventTypeNormal || ev.EventTime.IsZero() || ev.ReportingInstance == "" {
		t.Errorf("events.k8s.io/v1 event = %+v, want the recorded one", ev)
	}

	core, err := cs.CoreV1().Events("default").Get(ctx, ev.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("CoreV1().Events().Get(%s) = %v", ev.Name, err)
	}
	if core.Message != ev.Note || core.InvolvedObject.UID != cm.UID || core.ReportingController != "objwatch-e2e" || core.ReportingInstance != ev.ReportingInstance ||
		core.Action != "Check" || core.Reason != "Checked" || !core.EventTime.Equal(&ev.EventTime) || core.UID != ev.UID || core.ResourceVersion != ev.ResourceVersion {
		t.Errorf("core/v1 event = %+v, want the events.k8s.io one %+v in the core form", core, ev)
	}
	l, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=recorded,reportingComponent=objwatch-e2e"})
	if err != nil || len(l.Items) != 1 {
		t.Errorf("core/v1 list by involvedObject.name and reportingComponent = %v, %v, want the event", l, err)
	}
}
