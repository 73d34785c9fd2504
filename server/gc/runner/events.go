package runner

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/objwatch/objwatch/server/gc"
	"github.com/objwatch/objwatch/server/objects"
)

// eventSource is the component Kubernetes' garbage collector records its
// events as.
const eventSource = "garbage-collector-controller"

// Warn records a core/v1 Warning Event about the object at key through
// the object service, filled in as client-go's event recorder (which
// Kubernetes' collector uses) fills one: named after the object and the
// time, in the object's namespace ("default" for a cluster-scoped one),
// source.component and reportingComponent the collector's, count 1 and
// firstTimestamp = lastTimestamp. Unlike that recorder it does not
// aggregate repeats: the collector warns about each case once.
func (b backend) Warn(ctx context.Context, key string, m gc.Meta, reason, message string) error {
	res, ns, name, ok := b.registry.ForKey(key)
	if !ok {
		return nil
	}
	events, ok := b.registry.Get(schema.GroupVersionResource{Version: "v1", Resource: "events"})
	if !ok {
		return fmt.Errorf("events are not served")
	}
	now := time.Now()
	evNS := ns
	if evNS == "" {
		evNS = metav1.NamespaceDefault
	}
	evName := fmt.Sprintf("%s.%x", name, now.UnixNano())
	if len(validation.IsDNS1123Subdomain(evName)) > 0 {
		evName = string(uuid.NewUUID())
	}
	t := metav1.NewTime(now)
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: evName, Namespace: evNS},
		InvolvedObject: corev1.ObjectReference{
			Kind: res.Kind, APIVersion: res.APIVersion(), Namespace: ns, Name: name, UID: m.UID,
		},
		Reason: reason, Message: message, Type: corev1.EventTypeWarning,
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		Source:              corev1.EventSource{Component: eventSource},
		ReportingController: eventSource,
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ev)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: content}
	obj.SetAPIVersion("v1")
	obj.SetKind("Event")
	req := &objects.Request{Actor: collectorActor, Verb: "create", Resource: events, Namespace: evNS, Name: evName}
	_, err = b.objects.Create(ctx, req, obj, objects.WriteOptions{})
	return err
}
