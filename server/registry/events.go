package registry

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// EventsGroup serves events.k8s.io/v1 events, which are core/v1 events in
// storage, as in Kubernetes: one key space (StoragePrefix("", "events")),
// written through either API and read through both. An events.k8s.io
// object is converted to its core form when it is stored (StorageForm) and
// back when it is read (its strategy's Stored), with Kubernetes' field
// mapping (pkg/apis/events/v1 conversion in k8s.io/kubernetes):
//
//	events.k8s.io/v1          core/v1
//	note                      message
//	regarding                 involvedObject
//	reportingController       reportingComponent
//	deprecatedSource          source
//	deprecatedFirstTimestamp  firstTimestamp
//	deprecatedLastTimestamp   lastTimestamp
//	deprecatedCount           count
//
// and metadata, eventTime, series, related, reportingInstance, action,
// reason and type as they are.
const EventsGroup = "events.k8s.io"

// Conversion is how a resource served from another resource's storage
// stores its objects (see Resource.StoredAs).
type Conversion struct {
	// ToStorage returns the stored form of obj, a new map; obj is left
	// as it is.
	ToStorage func(obj map[string]any) (map[string]any, error)
}

// storageForms are the conversions of the kinds stored as another's, by
// apiVersion and kind.
var storageForms = map[schema.GroupVersionKind]*Conversion{
	eventsv1.SchemeGroupVersion.WithKind("Event"): eventsConversion,
}

// StorageForm returns the form obj is stored in: obj itself, or for a kind
// served from another kind's storage (an events.k8s.io/v1 Event) its
// conversion.
func StorageForm(obj map[string]any) (map[string]any, error) {
	u := unstructured.Unstructured{Object: obj}
	c := storageForms[u.GroupVersionKind()]
	if c == nil {
		return obj, nil
	}
	return c.ToStorage(obj)
}

var eventsConversion = &Conversion{ToStorage: func(obj map[string]any) (map[string]any, error) {
	var e corev1.Event
	return convertEvent(obj, &e, "v1", 0, 1)
}}

// eventsV1Strategy is the strategy of events.k8s.io/v1 events: objects are
// decoded as eventsv1.Event, validated as Kubernetes validates a request
// to that API (validateEventsV1), and read from their core form.
type eventsV1Strategy struct {
	typed[eventsv1.Event]
}

func (eventsV1Strategy) Stored(obj map[string]any) error {
	var e eventsv1.Event
	m, err := convertEvent(obj, &e, eventsv1.SchemeGroupVersion.String(), 1, 0)
	if err != nil {
		return err
	}
	clear(obj)
	for k, v := range m {
		obj[k] = v
	}
	return nil
}

// eventRenames pairs the events.k8s.io/v1 names of event fields with their
// core/v1 names; the other fields have the same name in both.
var eventRenames = [][2]string{
	{"note", "message"},
	{"regarding", "involvedObject"},
	{"reportingController", "reportingComponent"},
	{"deprecatedSource", "source"},
	{"deprecatedFirstTimestamp", "firstTimestamp"},
	{"deprecatedLastTimestamp", "lastTimestamp"},
	{"deprecatedCount", "count"},
}

// convertEvent returns obj, an event in one API's form (field names
// eventRenames[][from]), in the other's (eventRenames[][to], apiVersion),
// decoded into and encoded from into, a pointer to the target Go type, so
// that it is exactly what that API's own decoding makes of it. obj is
// left as it is.
func convertEvent(obj map[string]any, into any, apiVersion string, from, to int) (map[string]any, error) {
	m := make(map[string]any, len(obj))
	for k, v := range obj {
		m[k] = v
	}
	for _, r := range eventRenames {
		v, ok := m[r[from]]
		delete(m, r[from])
		delete(m, r[to])
		if ok {
			m[r[to]] = v
		}
	}
	m["apiVersion"] = apiVersion
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, into); err != nil {
		return nil, fmt.Errorf("convert event to %s: %w", apiVersion, err)
	}
	return toMap(into)
}

// toMap encodes a typed object as unstructured JSON, without the null
// creationTimestamp a typed object carries when it has none.
func toMap(obj any) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	if md, ok := m["metadata"].(map[string]any); ok && md["creationTimestamp"] == nil {
		delete(md, "creationTimestamp")
	}
	return m, nil
}

// eventToCore returns the core/v1 form of e.
func eventToCore(e *eventsv1.Event) (*corev1.Event, error) {
	m, err := toMap(e)
	if err != nil {
		return nil, err
	}
	var out corev1.Event
	_, err = convertEvent(m, &out, "v1", 0, 1)
	return &out, err
}

// Kubernetes' limits on event fields.
const (
	reportingInstanceLengthLimit = 128
	actionLengthLimit            = 128
	reasonLengthLimit            = 128
	noteLengthLimit              = 1024
)

// validateEvent is Kubernetes' validation of every event, whichever API it
// comes through (its legacyValidateEvent): the namespace agrees with the
// involved object's, and an event with an eventTime (a "new" event) has a
// reporting controller and instance, an action and a reason, within their
// length limits. Paths are the core fields', as Kubernetes reports them.
func validateEvent(e, _ *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	nsPath := field.NewPath("involvedObject", "namespace")
	if e.EventTime.IsZero() {
		switch {
		case e.InvolvedObject.Namespace == "" && e.Namespace != metav1.NamespaceNone && e.Namespace != metav1.NamespaceDefault:
			errs = append(errs, field.Invalid(nsPath, e.InvolvedObject.Namespace, "does not match event.namespace"))
		case e.InvolvedObject.Namespace != "" && e.Namespace != e.InvolvedObject.Namespace:
			errs = append(errs, field.Invalid(nsPath, e.InvolvedObject.Namespace, "does not match event.namespace"))
		}
	} else {
		if e.InvolvedObject.Namespace == "" && e.Namespace != metav1.NamespaceDefault && e.Namespace != metav1.NamespaceSystem {
			errs = append(errs, field.Invalid(nsPath, e.InvolvedObject.Namespace, "does not match event.namespace"))
		}
		required := func(path, v string, limit int) {
			p := field.NewPath(path)
			if v == "" {
				errs = append(errs, field.Required(p, ""))
			}
			if limit > 0 && len(v) > limit {
				errs = append(errs, field.Invalid(p, "", fmt.Sprintf("can have at most %v characters", limit)))
			}
		}
		required("reportingController", e.ReportingController, 0)
		for _, msg := range validation.IsQualifiedName(e.ReportingController) {
			errs = append(errs, field.Invalid(field.NewPath("reportingController"), e.ReportingController, msg))
		}
		required("reportingInstance", e.ReportingInstance, reportingInstanceLengthLimit)
		required("action", e.Action, actionLengthLimit)
		required("reason", e.Reason, reasonLengthLimit)
		if len(e.Message) > noteLengthLimit {
			errs = append(errs, field.Invalid(field.NewPath("message"), "", fmt.Sprintf("can have at most %v characters", noteLengthLimit)))
		}
	}
	for _, msg := range validation.IsDNS1123Subdomain(e.Namespace) {
		errs = append(errs, field.Invalid(field.NewPath("namespace"), e.Namespace, msg))
	}
	return errs
}

// validateEventsV1 adds to validateEvent what Kubernetes checks of events
// created or updated through events.k8s.io/v1: an eventTime, a Normal or
// Warning type, a series of at least two with a lastObservedTime, none of
// the deprecated fields on create, and on update nothing but the series
// (and metadata) changed.
func validateEventsV1(ev, oldEv *eventsv1.Event) field.ErrorList {
	e, err := eventToCore(ev)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	errs := validateEvent(e, nil)
	var old *corev1.Event
	if oldEv != nil {
		if old, err = eventToCore(oldEv); err != nil {
			return field.ErrorList{field.InternalError(nil, err)}
		}
	}
	if old == nil || !reflect.DeepEqual(e.Series, old.Series) {
		if s := e.Series; s != nil {
			if s.Count < 2 {
				errs = append(errs, field.Invalid(field.NewPath("series.count"), "", "should be at least 2"))
			}
			if s.LastObservedTime.IsZero() {
				errs = append(errs, field.Required(field.NewPath("series.lastObservedTime"), ""))
			}
		}
	}
	if old != nil {
		// Everything but metadata and the series is immutable.
		cur, err1 := toMap(e)
		prev, err2 := toMap(old)
		if err := errors.Join(err1, err2); err != nil {
			return append(errs, field.InternalError(nil, err))
		}
		keys := slices.Sorted(maps.Keys(cur))
		for k := range prev {
			if _, ok := cur[k]; !ok {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			switch k {
			case "metadata", "series", "apiVersion", "kind":
				continue
			}
			if !reflect.DeepEqual(cur[k], prev[k]) {
				errs = append(errs, field.Invalid(field.NewPath(k), cur[k], "field is immutable"))
			}
		}
		return errs
	}
	if e.EventTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("eventTime"), ""))
	}
	if e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.Invalid(field.NewPath("type"), "", fmt.Sprintf("has invalid value: %v", e.Type)))
	}
	var zero time.Time
	if e.FirstTimestamp.Time != zero {
		errs = append(errs, field.Invalid(field.NewPath("firstTimestamp"), "", "needs to be unset"))
	}
	if e.LastTimestamp.Time != zero {
		errs = append(errs, field.Invalid(field.NewPath("lastTimestamp"), "", "needs to be unset"))
	}
	if e.Count != 0 {
		errs = append(errs, field.Invalid(field.NewPath("count"), "", "needs to be unset"))
	}
	if e.Source.Component != "" || e.Source.Host != "" {
		errs = append(errs, field.Invalid(field.NewPath("source"), "", "needs to be unset"))
	}
	return errs
}

// eventFields are the field selector labels of core/v1 events, as
// Kubernetes' EventToSelectableFields has them; eventsV1Fields those of
// events.k8s.io/v1 events, which Kubernetes maps onto the same values
// under that API's names (regarding.*, reportingController).
var (
	eventFields    = eventFieldsOf("involvedObject", "source", "reportingComponent")
	eventsV1Fields = eventFieldsOf("regarding", "deprecatedSource", "reportingController")
)

// eventFieldsOf returns the field labels of an event whose API names its
// object reference, source and reporting controller fields ref, source
// and controller. The source label falls back to the reporting
// controller, as in Kubernetes.
func eventFieldsOf(ref, source, controller string) func(*unstructured.Unstructured) fields.Set {
	return func(u *unstructured.Unstructured) fields.Set {
		s := func(path ...string) string {
			v, _, _ := unstructured.NestedString(u.Object, path...)
			return v
		}
		src := s(source, "component")
		if src == "" {
			src = s(controller)
		}
		set := fields.Set{"reason": s("reason"), controller: s(controller), "source": src, "type": s("type")}
		for _, f := range []string{"kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"} {
			set[ref+"."+f] = s(ref, f)
		}
		return set
	}
}
