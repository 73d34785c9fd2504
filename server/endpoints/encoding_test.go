package endpoints_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const protobufType = "application/vnd.kubernetes.protobuf"

// wire records the Content-Type of every request body a client sends and
// of every response it gets, by resource path, so that a test can tell
// that a client-go which quietly falls back to JSON did not.
type wire struct {
	mu   sync.Mutex
	sent map[string]map[string]bool // resource (path segment) → request Content-Types
	got  map[string]map[string]bool // resource → response Content-Types
}

func newWire(cfg *rest.Config) *wire {
	wi := &wire{sent: map[string]map[string]bool{}, got: map[string]map[string]bool{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				wi.add(r, resp)
			}
			return resp, err
		})
	})
	return wi
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (wi *wire) add(r *http.Request, resp *http.Response) {
	key := resourceOf(r.URL.Path)
	if key == "" {
		return
	}
	wi.mu.Lock()
	defer wi.mu.Unlock()
	note(wi.sent, key, r.Header.Get("Content-Type"))
	note(wi.got, key, resp.Header.Get("Content-Type"))
}

func note(m map[string]map[string]bool, key, ct string) {
	if ct == "" {
		return
	}
	if m[key] == nil {
		m[key] = map[string]bool{}
	}
	m[key][ct] = true
}

// resourceOf is the resource a request's path names (configmaps, pods,
// ...), "" for discovery.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			return parts[i+2]
		}
	}
	return ""
}

// only fails unless every Content-Type seen for res is one of want (and
// one was seen).
func (wi *wire) only(t *testing.T, what string, m map[string]map[string]bool, res string, want ...string) {
	t.Helper()
	wi.mu.Lock()
	defer wi.mu.Unlock()
	if len(m[res]) == 0 {
		t.Errorf("%s of %s: none seen", what, res)
	}
	for ct := range m[res] {
		ok := false
		for _, w := range want {
			ok = ok || ct == w
		}
		if !ok {
			t.Errorf("%s of %s: %q, want only %q", what, res, ct, want)
		}
	}
}

// client is what round trips need of a client-go typed client.
type client[T runtime.Object, L runtime.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

// roundTrip creates obj, reads it, lists and updates it (mutate changes
// it), deletes it, and checks that a watch started before saw all three
// changes, typed; then that a get of what is gone is client-go's NotFound.
func roundTrip[T interface {
	runtime.Object
	metav1.Object
}, L runtime.Object](t *testing.T, c client[T, L], obj T, mutate func(T)) {
	t.Helper()
	ctx := t.Context()
	name := obj.GetName()
	l, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	rv, _ := meta.NewAccessor().ResourceVersion(l)
	w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()

	created, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if created.GetUID() == "" || created.GetResourceVersion() == "" || created.GetCreationTimestamp().Time.IsZero() {
		t.Errorf("create %s = uid %q, rv %q, created %v; want all set", name, created.GetUID(), created.GetResourceVersion(), created.GetCreationTimestamp())
	}
	got, err := c.Get(ctx, name, metav1.GetOptions{})
	if err != nil || got.GetUID() != created.GetUID() || got.GetResourceVersion() != created.GetResourceVersion() {
		t.Fatalf("get %s = %v, %v; want the created object", name, got, err)
	}
	l, err = c.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	items, err := meta.ExtractList(l)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range items {
		m, _ := meta.Accessor(it)
		found = found || m.GetName() == name && m.GetUID() == created.GetUID()
	}
	if !found {
		t.Errorf("list of %d items lacks %s", len(items), name)
	}
	mutate(got)
	updated, err := c.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil || updated.GetResourceVersion() == created.GetResourceVersion() {
		t.Fatalf("update %s = %v, %v; want a new resourceVersion", name, updated, err)
	}
	if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
	var types []watch.EventType
	timeout := time.After(10 * time.Second)
	for len(types) < 3 {
		select {
		case ev := <-w.ResultChan():
			o, ok := ev.Object.(T)
			if !ok {
				t.Fatalf("watch event %s of %T, want %T", ev.Type, ev.Object, obj)
			}
			if o.GetName() == name {
				types = append(types, ev.Type)
			}
		case <-timeout:
			t.Fatalf("watch events of %s: %v, want ADDED MODIFIED DELETED", name, types)
		}
	}
	if types[0] != watch.Added || types[1] != watch.Modified || types[2] != watch.Deleted {
		t.Errorf("watch events of %s: %v, want ADDED MODIFIED DELETED", name, types)
	}
	if _, err := c.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get of deleted %s = %v, want NotFound", name, err)
	}
}

// TestProtobufClientGo: client-go's typed clients with protobuf as their
// content type create, get, list, watch, update and delete ConfigMaps,
// Pods and Deployments, and every request and answer on the wire is
// protobuf (errors too), watches framed as Kubernetes frames them.
func TestProtobufClientGo(t *testing.T) {
	env := testenv.Start(t)
	cfg := env.Config.RESTConfig()
	cfg.ContentType = protobufType
	cfg.AcceptContentTypes = protobufType
	wi := newWire(cfg)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	containers := []corev1.Container{{Name: "c", Image: "busybox"}}
	roundTrip(t, cs.CoreV1().ConfigMaps("default"),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pb"}, Data: map[string]string{"k": "v"}, BinaryData: map[string][]byte{"b": {0, 1, 2}}},
		func(c *corev1.ConfigMap) { c.Data["k"] = "w" })
	roundTrip(t, cs.CoreV1().Pods("default"),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pb"}, Spec: corev1.PodSpec{Containers: containers}},
		func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} })
	roundTrip(t, cs.AppsV1().Deployments("default"),
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "pb"}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pb"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "pb"}}, Spec: corev1.PodSpec{Containers: containers}},
		}},
		func(d *appsv1.Deployment) { d.Spec.Replicas = new(int32(3)) })

	// A Deployment's Scale, read and written in protobuf.
	deps := cs.AppsV1().Deployments("default")
	if _, err := deps.Create(t.Context(), &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sc"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "sc"}}, Spec: corev1.PodSpec{Containers: containers}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sc, err := deps.GetScale(t.Context(), "sc", metav1.GetOptions{})
	if err != nil || sc.Spec.Replicas != 1 {
		t.Fatalf("GetScale = %+v, %v", sc, err)
	}
	sc.Spec.Replicas = 4
	if sc, err = deps.UpdateScale(t.Context(), "sc", sc, metav1.UpdateOptions{}); err != nil || sc.Spec.Replicas != 4 {
		t.Errorf("UpdateScale to 4 = %+v, %v", sc, err)
	}
	for _, res := range []string{"configmaps", "pods", "deployments"} {
		wi.only(t, "requests", wi.sent, res, protobufType)
		wi.only(t, "responses", wi.got, res, protobufType, protobufType+";stream=watch")
	}
	// The binary data came back as sent.
	cm, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bin"}, BinaryData: map[string][]byte{"b": {0, 255}}}, metav1.CreateOptions{})
	if err != nil || string(cm.BinaryData["b"]) != "\x00\xff" {
		t.Errorf("create with binaryData = %v, %v", cm, err)
	}
	// A Status error arrives as protobuf and decodes to its reason.
	_, err = cs.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bin"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create = %v, want AlreadyExists", err)
	}
}

// dynamicClient adapts a client-go dynamic resource client to roundTrip.
type dynamicClient struct{ dynamic.ResourceInterface }

func (c dynamicClient) Create(ctx context.Context, obj *unstructured.Unstructured, o metav1.CreateOptions) (*unstructured.Unstructured, error) {
	return c.ResourceInterface.Create(ctx, obj, o)
}

func (c dynamicClient) Update(ctx context.Context, obj *unstructured.Unstructured, o metav1.UpdateOptions) (*unstructured.Unstructured, error) {
	return c.ResourceInterface.Update(ctx, obj, o)
}

func (c dynamicClient) Get(ctx context.Context, name string, o metav1.GetOptions) (*unstructured.Unstructured, error) {
	return c.ResourceInterface.Get(ctx, name, o)
}

func (c dynamicClient) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	return c.ResourceInterface.Delete(ctx, name, o)
}

const cborType = "application/cbor"

// TestCBORClientGo: client-go preferring CBOR (its feature gates
// ClientsAllowCBOR and ClientsPreferCBOR) creates, gets, lists, watches,
// updates and deletes a custom resource and ConfigMaps through its dynamic
// client, and ConfigMaps through a typed client with CBOR as its content
// type; every request and answer on the wire is CBOR, watches a CBOR
// sequence. A binary that links Kubernetes' feature gates, as this test's
// (the server's) does, makes client-go read its gates from them instead of
// from the KUBE_FEATURE_ environment variables: the test sets them there,
// as a Kubernetes component's --feature-gates would.
func TestCBORClientGo(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		featuregate.Feature(clientfeatures.ClientsAllowCBOR): true, featuregate.Feature(clientfeatures.ClientsPreferCBOR): true,
	})
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	if r := a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", servertest.ScaleCRD); r.Code != http.StatusCreated {
		t.Fatalf("create CRD = %d %s", r.Code, r.Body)
	}
	servertest.EventuallyWithin(t, 10*time.Second, func() bool { return a.JSON("GET", servertest.Widgets, "").Code == http.StatusOK })
	cfg := env.Config.RESTConfig()
	wi := newWire(cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "scale.objwatch.io", Version: "v1", Resource: "widgets"}).Namespace("default")
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scale.objwatch.io/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "cb"}, "spec": map[string]any{"replicas": int64(1), "image": "x"},
	}}
	roundTrip(t, client[*unstructured.Unstructured, *unstructured.UnstructuredList](dynamicClient{widgets}), w,
		func(u *unstructured.Unstructured) {
			unstructured.SetNestedField(u.Object, int64(2), "spec", "replicas")
		})
	cms := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default")
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cb"}, "data": map[string]any{"k": "v"},
	}}
	roundTrip(t, client[*unstructured.Unstructured, *unstructured.UnstructuredList](dynamicClient{cms}), cm,
		func(u *unstructured.Unstructured) { unstructured.SetNestedField(u.Object, "w", "data", "k") })
	wi.only(t, "requests", wi.sent, "widgets", cborType)
	wi.only(t, "responses", wi.got, "widgets", cborType, "application/cbor-seq")

	// A typed client with CBOR as its content type; binary data as byte
	// strings.
	cfg.ContentType = cborType
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, cs.CoreV1().ConfigMaps("default"),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cbt"}, BinaryData: map[string][]byte{"b": {0, 255}}},
		func(c *corev1.ConfigMap) { c.BinaryData["c"] = []byte{1} })
	got, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bin"}, BinaryData: map[string][]byte{"b": {0, 255}}}, metav1.CreateOptions{})
	if err != nil || string(got.BinaryData["b"]) != "\x00\xff" {
		t.Errorf("create with binaryData = %v, %v", got, err)
	}
	if r := a.JSON("GET", servertest.CMs+"/bin", ""); !strings.Contains(string(r.Body), `"binaryData":{"b":"AP8="}`) {
		t.Errorf("stored binaryData, read as JSON: %s", r.Body)
	}
	wi.only(t, "requests", wi.sent, "configmaps", cborType)
	wi.only(t, "responses", wi.got, "configmaps", cborType, "application/cbor-seq")
}
