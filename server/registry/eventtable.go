package registry

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// eventColumns are Kubernetes' printer columns of events, the same through
// both APIs: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE, and with -o wide
// SUBOBJECT, SOURCE, FIRST SEEN, COUNT and NAME (the only name column:
// events have no leading one). toCore decodes a served object into its
// core/v1 form.
func eventColumns(toCore func(map[string]any) *corev1.Event) []Column {
	doc := corev1.Event{}.SwaggerDoc()
	cell := func(f func(e *corev1.Event) any) func(map[string]any) any {
		return func(obj map[string]any) any { return f(toCore(obj)) }
	}
	return []Column{
		{Name: "Last Seen", Type: "string", Description: doc["lastTimestamp"], Value: cell(func(e *corev1.Event) any { last, _, _ := eventTimes(e); return last })},
		{Name: "Type", Type: "string", Description: doc["type"], Value: cell(func(e *corev1.Event) any { return e.Type })},
		{Name: "Reason", Type: "string", Description: doc["reason"], Value: cell(func(e *corev1.Event) any { return e.Reason })},
		{Name: "Object", Type: "string", Description: doc["involvedObject"], Value: cell(func(e *corev1.Event) any {
			target := strings.ToLower(e.InvolvedObject.Kind)
			if e.InvolvedObject.Name != "" {
				target += "/" + e.InvolvedObject.Name
			}
			return target
		})},
		{Name: "Subobject", Type: "string", Priority: 1, Description: corev1.ObjectReference{}.SwaggerDoc()["fieldPath"], Value: cell(func(e *corev1.Event) any { return e.InvolvedObject.FieldPath })},
		{Name: "Source", Type: "string", Priority: 1, Description: doc["source"], Value: cell(func(e *corev1.Event) any {
			component, instance := firstNonEmpty(e.Source.Component, e.ReportingController), firstNonEmpty(e.Source.Host, e.ReportingInstance)
			if component == "" || instance == "" {
				return component
			}
			return component + ", " + instance
		})},
		{Name: "Message", Type: "string", Description: doc["message"], Value: cell(func(e *corev1.Event) any { return strings.TrimSpace(e.Message) })},
		{Name: "First Seen", Type: "string", Priority: 1, Description: doc["firstTimestamp"], Value: cell(func(e *corev1.Event) any { _, first, _ := eventTimes(e); return first })},
		{Name: "Count", Type: "string", Priority: 1, Description: doc["count"], Value: cell(func(e *corev1.Event) any { _, _, n := eventTimes(e); return n })},
		{Name: "Name", Type: "string", Format: "name", Priority: 1, Description: metav1.ObjectMeta{}.SwaggerDoc()["name"], Value: cell(func(e *corev1.Event) any { return e.Name })},
	}
}

// eventTimes returns an event's last and first seen, as ages, and its
// count, as Kubernetes' event printer computes them.
func eventTimes(e *corev1.Event) (last, first string, count int64) {
	first = Age(e.FirstTimestamp.Time)
	if e.FirstTimestamp.IsZero() {
		first = Age(e.EventTime.Time)
	}
	last = Age(e.LastTimestamp.Time)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count = int64(e.Count)
	if e.Series != nil {
		last, count = Age(e.Series.LastObservedTime.Time), int64(e.Series.Count)
	} else if count == 0 {
		count = 1
	}
	return last, first, count
}

// Age renders the time since t as kubectl does (5s, 3m, 2d); "<unknown>"
// for the zero time. Table columns of every resource use it.
func Age(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t))
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// coreEventOf decodes a core/v1 event; eventsV1AsCore an events.k8s.io/v1
// one into its core form. A malformed object shows empty cells.
func coreEventOf(obj map[string]any) *corev1.Event {
	var e corev1.Event
	runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &e)
	return &e
}

func eventsV1AsCore(obj map[string]any) *corev1.Event {
	var e corev1.Event
	convertEvent(obj, &e, "v1", 0, 1)
	return &e
}
