package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/objwatch/objwatch/testenv"
)

func TestConfigMapCRUD(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t)
	cs := typedClient(t, env)
	ctx := t.Context()
	createNamespace(ctx, t, cs, "crud")
	cms := cs.CoreV1().ConfigMaps("crud")

	created := createConfigMap(ctx, t, cs, "crud", "a", map[string]string{"app": "x"}, map[string]string{"k": "v"})
	if created.UID == "" || created.CreationTimestamp.IsZero() || created.ResourceVersion == "" {
		t.Errorf("Create(a) = uid %q, creationTimestamp %v, resourceVersion %q; want all set", created.UID, created.CreationTimestamp, created.ResourceVersion)
	}
	got, err := cms.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get(a) = %v", err)
	}
	if diff := cmp.Diff(created, got); diff != "" {
		t.Errorf("Get(a) differs from Create(a) (-create +get):\n%s", diff)
	}
	createConfigMap(ctx, t, cs, "crud", "b", map[string]string{"app": "y"}, nil)
	createConfigMap(ctx, t, cs, "crud", "c", map[string]string{"app": "x"}, nil)

	t.Run("List", func(t *testing.T) {
		for _, tc := range []struct {
			opts metav1.ListOptions
			want []string
		}{
			{metav1.ListOptions{}, []string{"a", "b", "c"}},
			{metav1.ListOptions{LabelSelector: "app=x"}, []string{"a", "c"}},
			{metav1.ListOptions{LabelSelector: "app!=x"}, []string{"b"}},
			{metav1.ListOptions{FieldSelector: "metadata.name=b"}, []string{"b"}},
			{metav1.ListOptions{FieldSelector: "metadata.name!=b", LabelSelector: "app"}, []string{"a", "c"}},
			{metav1.ListOptions{LabelSelector: "app=z"}, nil},
		} {
			l, err := cms.List(ctx, tc.opts)
			if err != nil {
				t.Errorf("List(%+v) = %v", tc.opts, err)
				continue
			}
			if got := itemNames(l.Items); !slices.Equal(got, tc.want) {
				t.Errorf("List(%+v) = %v, want %v", tc.opts, got, tc.want)
			}
		}
	})

	t.Run("Update", func(t *testing.T) {
		cur, err := cms.Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Get(a) = %v", err)
		}
		stale := cur.DeepCopy()
		cur.Data["k"] = "v2"
		upd, err := cms.Update(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("Update(a) = %v", err)
		}
		if upd.ResourceVersion == cur.ResourceVersion || upd.Data["k"] != "v2" || upd.UID != cur.UID {
			t.Errorf("Update(a) = rv %s data %v uid %s, want a new rv, data k=v2 and uid %s", upd.ResourceVersion, upd.Data, upd.UID, cur.UID)
		}
		got, err := cms.Get(ctx, "a", metav1.GetOptions{})
		if err != nil || got.Data["k"] != "v2" || got.ResourceVersion != upd.ResourceVersion {
			t.Errorf("Get(a) after update = %v, %v; want data k=v2 at rv %s", got.Data, err, upd.ResourceVersion)
		}
		stale.Data["k"] = "stale"
		if _, err := cms.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Errorf("Update(a with stale resourceVersion %s) = %v, want Conflict", stale.ResourceVersion, err)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			call func() error
			want metav1.StatusReason
		}{
			{"CreateExisting", func() error {
				_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
				return err
			}, metav1.StatusReasonAlreadyExists},
			{"GetMissing", func() error {
				_, err := cms.Get(ctx, "missing", metav1.GetOptions{})
				return err
			}, metav1.StatusReasonNotFound},
			{"UpdateMissing", func() error {
				_, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "missing", ResourceVersion: "1"}}, metav1.UpdateOptions{})
				return err
			}, metav1.StatusReasonNotFound},
			{"DeleteMissing", func() error {
				return cms.Delete(ctx, "missing", metav1.DeleteOptions{})
			}, metav1.StatusReasonNotFound},
			{"InvalidName", func() error {
				_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "Not_A_Name"}}, metav1.CreateOptions{})
				return err
			}, metav1.StatusReasonInvalid},
		} {
			if err := tc.call(); apierrors.ReasonForError(err) != tc.want {
				t.Errorf("%s: error = %v, want reason %s", tc.name, err, tc.want)
			}
		}
	})

	t.Run("Patch", func(t *testing.T) {
		for _, tc := range []struct {
			pt         types.PatchType
			patch      string
			wantData   map[string]string
			wantLabels map[string]string
		}{
			{types.JSONPatchType, `[{"op":"replace","path":"/data/k","value":"v2"},{"op":"remove","path":"/metadata/labels/drop"}]`,
				map[string]string{"k": "v2"}, map[string]string{"keep": "1"}},
			{types.MergePatchType, `{"data":{"k2":"v2"},"metadata":{"labels":{"drop":null}}}`,
				map[string]string{"k": "v", "k2": "v2"}, map[string]string{"keep": "1"}},
			{types.StrategicMergePatchType, `{"data":{"k":null,"k3":"v3"},"metadata":{"labels":{"new":"1"}}}`,
				map[string]string{"k3": "v3"}, map[string]string{"keep": "1", "drop": "1", "new": "1"}},
		} {
			name := "patch-" + string(tc.pt[len("application/"):len(tc.pt)-len("+json")])
			orig := createConfigMap(ctx, t, cs, "crud", name, map[string]string{"keep": "1", "drop": "1"}, map[string]string{"k": "v"})
			out, err := cms.Patch(ctx, name, tc.pt, []byte(tc.patch), metav1.PatchOptions{})
			if err != nil {
				t.Errorf("Patch(%s, %s) = %v", name, tc.pt, err)
				continue
			}
			got, err := cms.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Get(%s) = %v", name, err)
			}
			for _, o := range []*corev1.ConfigMap{out, got} {
				if !cmp.Equal(o.Data, tc.wantData) || !cmp.Equal(o.Labels, tc.wantLabels) {
					t.Errorf("Patch(%s, %s) = data %v labels %v, want %v %v", name, tc.pt, o.Data, o.Labels, tc.wantData, tc.wantLabels)
				}
			}
			if out.ResourceVersion == orig.ResourceVersion || out.ResourceVersion != got.ResourceVersion || out.UID != orig.UID {
				t.Errorf("Patch(%s, %s) = rv %s uid %s, get rv %s; want a new rv (was %s) and uid %s", name, tc.pt, out.ResourceVersion, out.UID, got.ResourceVersion, orig.ResourceVersion, orig.UID)
			}
		}
		bad := `[{"op":"test","path":"/data/k","value":"nope"}]`
		if _, err := cms.Patch(ctx, "a", types.JSONPatchType, []byte(bad), metav1.PatchOptions{}); err == nil || apierrors.IsInternalError(err) {
			t.Errorf("Patch(a, failing json patch test op) = %v, want a client error", err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		if err := cms.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("Delete(b) = %v", err)
		}
		if _, err := cms.Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Get(b) after delete = %v, want NotFound", err)
		}
	})

	t.Run("DeleteCollection", func(t *testing.T) {
		createNamespace(ctx, t, cs, "dc")
		for i, n := range names("cm", 6) {
			tier := "keep"
			if i%2 == 0 {
				tier = "tmp"
			}
			createConfigMap(ctx, t, cs, "dc", n, map[string]string{"tier": tier}, nil)
		}
		err := cs.CoreV1().ConfigMaps("dc").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "tier=tmp"})
		if err != nil {
			t.Fatalf("DeleteCollection(tier=tmp) = %v", err)
		}
		l, err := cs.CoreV1().ConfigMaps("dc").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("List() = %v", err)
		}
		if got, want := itemNames(l.Items), []string{"cm-01", "cm-03", "cm-05"}; !slices.Equal(got, want) {
			t.Errorf("List() after DeleteCollection(tier=tmp) = %v, want %v", got, want)
		}
		// Other namespaces are untouched.
		if _, err := cms.Get(ctx, "a", metav1.GetOptions{}); err != nil {
			t.Errorf("Get(crud/a) after DeleteCollection in dc = %v", err)
		}
	})

	t.Run("Pagination", func(t *testing.T) {
		createNamespace(ctx, t, cs, "pages")
		pcms := cs.CoreV1().ConfigMaps("pages")
		all := names("cm", 25)
		for _, n := range all {
			createConfigMap(ctx, t, cs, "pages", n, nil, nil)
		}
		var seen []string
		var sizes []int
		opts := metav1.ListOptions{Limit: 10}
		var firstRV string
		for page := 0; ; page++ {
			l, err := pcms.List(ctx, opts)
			if err != nil {
				t.Fatalf("List(%+v) = %v", opts, err)
			}
			sizes = append(sizes, len(l.Items))
			seen = append(seen, itemNames(l.Items)...)
			if page == 0 {
				firstRV = l.ResourceVersion
				if l.RemainingItemCount == nil || *l.RemainingItemCount != 15 {
					t.Errorf("List(limit 10).RemainingItemCount = %v, want 15", ptrString(l.RemainingItemCount))
				}
				// Later pages come from the first page's snapshot.
				createConfigMap(ctx, t, cs, "pages", "zz-late", nil, nil)
				if err := pcms.Delete(ctx, "cm-24", metav1.DeleteOptions{}); err != nil {
					t.Fatalf("Delete(cm-24) = %v", err)
				}
			} else if l.ResourceVersion != firstRV {
				t.Errorf("List(page %d).ResourceVersion = %s, want the first page's %s", page, l.ResourceVersion, firstRV)
			}
			if l.Continue == "" {
				break
			}
			if page > 5 {
				t.Fatalf("List(limit 10) did not end after %d pages", page)
			}
			opts.Continue = l.Continue
		}
		if want := []int{10, 10, 5}; !slices.Equal(sizes, want) {
			t.Errorf("List(limit 10) page sizes = %v, want %v", sizes, want)
		}
		if !slices.Equal(seen, all) {
			t.Errorf("List(limit 10) pages = %v, want every object once: %v", seen, all)
		}
	})

	t.Run("ExactResourceVersion", func(t *testing.T) {
		createNamespace(ctx, t, cs, "exact")
		ecms := cs.CoreV1().ConfigMaps("exact")
		cm := createConfigMap(ctx, t, cs, "exact", "x", nil, map[string]string{"gen": "1"})
		old, err := ecms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("List() = %v", err)
		}
		cm.Data["gen"] = "2"
		if _, err := ecms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("Update(x) = %v", err)
		}
		createConfigMap(ctx, t, cs, "exact", "y", nil, nil)
		for _, tc := range []struct {
			opts     metav1.ListOptions
			wantRV   string
			wantData []string
		}{
			{metav1.ListOptions{ResourceVersion: old.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact}, old.ResourceVersion, []string{"x=1"}},
			// A limit with an explicit resourceVersion and no match means Exact.
			{metav1.ListOptions{ResourceVersion: old.ResourceVersion, Limit: 5}, old.ResourceVersion, []string{"x=1"}},
			{metav1.ListOptions{}, "", []string{"x=2", "y="}},
		} {
			l, err := ecms.List(ctx, tc.opts)
			if err != nil {
				t.Errorf("List(%+v) = %v", tc.opts, err)
				continue
			}
			var got []string
			for _, it := range l.Items {
				got = append(got, it.Name+"="+it.Data["gen"])
			}
			if !slices.Equal(got, tc.wantData) || (tc.wantRV != "" && l.ResourceVersion != tc.wantRV) {
				t.Errorf("List(%+v) = %v at rv %s, want %v at rv %s", tc.opts, got, l.ResourceVersion, tc.wantData, tc.wantRV)
			}
		}
	})
}

func TestNamespaces(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t)
	cs := typedClient(t, env)
	ctx := t.Context()

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}
	if _, err := cs.CoreV1().ConfigMaps("nope").Create(ctx, cm, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMaps(nope).Create(cm) = %v, want NotFound", err)
	}

	createNamespace(ctx, t, cs, "scratch")
	for _, n := range names("cm", 3) {
		createConfigMap(ctx, t, cs, "scratch", n, nil, nil)
	}
	createConfigMap(ctx, t, cs, "default", "survivor", nil, nil)
	l, err := cs.CoreV1().ConfigMaps("scratch").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 3 {
		t.Fatalf("ConfigMaps(scratch).List() = %d items, %v; want 3", len(l.Items), err)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, "scratch", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("Namespaces().Delete(scratch) = %v", err)
	}
	// Namespace deletion is asynchronous in Kubernetes: wait for it.
	poll(ctx, t, "namespace scratch to be gone", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "scratch", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	l, err = cs.CoreV1().ConfigMaps("scratch").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 0 {
		t.Errorf("ConfigMaps(scratch).List() after namespace delete = %v, %v; want none", itemNames(l.Items), err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMaps(default).Get(survivor) after deleting scratch = %v", err)
	}
	// The name can be used again, and starts empty.
	createNamespace(ctx, t, cs, "scratch")
	l, err = cs.CoreV1().ConfigMaps("scratch").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 0 {
		t.Errorf("ConfigMaps(scratch).List() in re-created namespace = %v, %v; want none", itemNames(l.Items), err)
	}
}

// TestRetryOnConflict has writers race on one counter through
// retry.RetryOnConflict: every increment must land exactly once.
func TestRetryOnConflict(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t)
	cs := typedClient(t, env)
	ctx := t.Context()
	cms := cs.CoreV1().ConfigMaps("default")
	createConfigMap(ctx, t, cs, "default", "counter", nil, map[string]string{"n": "0"})

	const writers, increments = 8, 10
	// Generous: in each round of attempts all writers but one lose. (No
	// Cap: reaching it would end the retries.)
	backoff := wait.Backoff{Steps: 500, Duration: 2 * time.Millisecond, Factor: 1, Jitter: 1}
	var conflicts atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	start := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			<-start
			for i := range increments {
				err := retry.RetryOnConflict(backoff, func() error {
					cm, err := cms.Get(ctx, "counter", metav1.GetOptions{})
					if err != nil {
						return err
					}
					n, err := strconv.Atoi(cm.Data["n"])
					if err != nil {
						return err
					}
					cm.Data["n"] = strconv.Itoa(n + 1)
					_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
					if apierrors.IsConflict(err) {
						conflicts.Add(1)
					}
					return err
				})
				if err != nil {
					errs <- fmt.Errorf("writer %d, increment %d: %w", w, i, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("RetryOnConflict() = %v", err)
	}
	cm, err := cms.Get(ctx, "counter", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get(counter) = %v", err)
	}
	if got, want := cm.Data["n"], strconv.Itoa(writers*increments); got != want {
		t.Errorf("counter after %d writers x %d increments = %s, want %s", writers, increments, got, want)
	}
	if conflicts.Load() == 0 {
		t.Errorf("conflicts during %d concurrent writers = 0, want some (is the update conditional on resourceVersion?)", writers)
	}
	t.Logf("%d conflicts retried", conflicts.Load())
}

// TestTwoServers runs two servers on one etcd: each sees the other's writes.
func TestTwoServers(t *testing.T) {
	t.Parallel()
	ep := testenv.StartEtcd(t)
	envA, envB := testenv.Start(t, testenv.WithEtcd(ep)), testenv.Start(t, testenv.WithEtcd(ep))
	a, b := typedClient(t, envA), typedClient(t, envB)
	ctx := t.Context()

	created := createConfigMap(ctx, t, a, "default", "shared", nil, map[string]string{"v": "1"})
	got, err := b.CoreV1().ConfigMaps("default").Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("B: Get(shared) = %v", err)
	}
	if diff := cmp.Diff(created, got); diff != "" {
		t.Errorf("B: Get(shared) differs from A: Create(shared) (-A +B):\n%s", diff)
	}

	l, err := b.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("B: List() = %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	w, err := b.CoreV1().ConfigMaps("default").Watch(wctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatalf("B: Watch(rv %s) = %v", l.ResourceVersion, err)
	}
	defer w.Stop()

	created.Data["v"] = "2"
	updated, err := a.CoreV1().ConfigMaps("default").Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("A: Update(shared) = %v", err)
	}
	if err := a.CoreV1().ConfigMaps("default").Delete(ctx, "shared", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("A: Delete(shared) = %v", err)
	}
	want := []string{"MODIFIED shared v=2 rv=" + updated.ResourceVersion, "DELETED shared"}
	var events []string
	for len(events) < len(want) {
		ev, ok := <-w.ResultChan()
		if !ok {
			t.Fatalf("B: watch ended after %v, want %v", events, want)
		}
		cm, isCM := ev.Object.(*corev1.ConfigMap)
		if !isCM {
			t.Fatalf("B: watch event %s with %T, want a ConfigMap", ev.Type, ev.Object)
		}
		s := fmt.Sprintf("%s %s", ev.Type, cm.Name)
		if ev.Type == watch.Modified {
			s += fmt.Sprintf(" v=%s rv=%s", cm.Data["v"], cm.ResourceVersion)
		}
		events = append(events, s)
	}
	if !slices.Equal(events, want) {
		t.Errorf("B: watch events = %v, want %v", events, want)
	}
	if _, err := b.CoreV1().ConfigMaps("default").Get(ctx, "shared", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("B: Get(shared) after A deleted it = %v, want NotFound", err)
	}

	// A CRD created through A is served by B too.
	createWidgetCRD(ctx, t, envA)
	poll(ctx, t, "B's discovery to list "+widgetGVR.String(), func(ctx context.Context) (bool, error) {
		return discoveryHas(b, widgetGVR)
	})
	wb, err := dynamicClient(t, envB).Resource(widgetGVR).Namespace("default").Create(ctx, widget("w", map[string]any{"size": int64(2)}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("B: Create(widget w) = %v", err)
	}
	wa, err := dynamicClient(t, envA).Resource(widgetGVR).Namespace("default").Get(ctx, "w", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("A: Get(widget w) = %v", err)
	}
	if diff := cmp.Diff(wb.Object, wa.Object); diff != "" {
		t.Errorf("A: Get(widget w) differs from B: Create(widget w) (-B +A):\n%s", diff)
	}
}

func itemNames(items []corev1.ConfigMap) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Name)
	}
	return out
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// widgetGVR is the custom resource of widgetCRD.
var widgetGVR = schema.GroupVersionResource{Group: "e2e.objwatch.io", Version: "v1", Resource: "widgets"}

// widgetCRD defines Widgets: spec.size is a required integer >= 1,
// spec.color an enum defaulting to red; status is a subresource; Size and
// Color are printer columns.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	one := 1.0
	str := func(s string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(strconv.Quote(s))} }
	red := str("red")
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: widgetGVR.Resource + "." + widgetGVR.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: widgetGVR.Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: widgetGVR.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
					{Name: "Color", Type: "string", JSONPath: ".spec.color"},
				},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {
							Type:     "object",
							Required: []string{"size"},
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"size":  {Type: "integer", Minimum: &one},
								"color": {Type: "string", Enum: []apiextensionsv1.JSON{red, str("green"), str("blue")}, Default: &red},
							},
						},
						"status": {
							Type:       "object",
							Properties: map[string]apiextensionsv1.JSONSchemaProps{"phase": {Type: "string"}},
						},
					},
				}},
			}},
		},
	}
}

// createWidgetCRD creates widgetCRD and waits until it is Established and
// discovery lists its resource.
func createWidgetCRD(ctx context.Context, t *testing.T, env *testenv.Env) {
	t.Helper()
	ext, err := apiextensionsclientset.NewForConfig(restConfig(t, env))
	if err != nil {
		t.Fatalf("apiextensions NewForConfig() = %v", err)
	}
	crd := widgetCRD()
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("CustomResourceDefinitions().Create(%s) = %v", crd.Name, err)
	}
	poll(ctx, t, "CRD "+crd.Name+" to be Established", func(ctx context.Context) (bool, error) {
		c, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	cs := typedClient(t, env)
	poll(ctx, t, "discovery to list "+widgetGVR.String(), func(ctx context.Context) (bool, error) {
		return discoveryHas(cs, widgetGVR)
	})
}

// discoveryHas reports whether discovery lists gvr.
func discoveryHas(cs kubernetes.Interface, gvr schema.GroupVersionResource) (bool, error) {
	l, err := cs.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range l.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

func widget(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": widgetGVR.GroupVersion().String(),
		"kind":       "Widget",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// widgetState is what the custom resource tests compare.
type widgetState struct {
	Generation int64
	Size       int64
	Color      string
	Phase      string
}

func stateOf(u *unstructured.Unstructured) widgetState {
	size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
	color, _, _ := unstructured.NestedString(u.Object, "spec", "color")
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return widgetState{Generation: u.GetGeneration(), Size: size, Color: color, Phase: phase}
}

func TestCustomResources(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t)
	ctx := t.Context()
	cs := typedClient(t, env)
	dc := dynamicClient(t, env)
	createNamespace(ctx, t, cs, "crs")
	createWidgetCRD(ctx, t, env)
	wc := dc.Resource(widgetGVR).Namespace("crs")

	w1, err := wc.Create(ctx, widget("w1", map[string]any{"size": int64(3)}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create(w1) = %v", err)
	}
	if got, want := stateOf(w1), (widgetState{Generation: 1, Size: 3, Color: "red"}); got != want {
		t.Errorf("Create(w1) = %+v, want %+v (color defaulted)", got, want)
	}
	if w1.GetUID() == "" || w1.GetResourceVersion() == "" || w1.GetCreationTimestamp().Time.IsZero() {
		t.Errorf("Create(w1) = uid %q rv %q created %v, want all set", w1.GetUID(), w1.GetResourceVersion(), w1.GetCreationTimestamp())
	}
	// Create ignores status when it is a subresource.
	w2 := widget("w2", map[string]any{"size": int64(1), "color": "blue"})
	w2.Object["status"] = map[string]any{"phase": "Cheating"}
	if w2, err = wc.Create(ctx, w2, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Create(w2) = %v", err)
	}
	if got, want := stateOf(w2), (widgetState{Generation: 1, Size: 1, Color: "blue"}); got != want {
		t.Errorf("Create(w2 with status) = %+v, want %+v", got, want)
	}

	t.Run("Invalid", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			spec      map[string]any
			wantField string
		}{
			{"missing-size", map[string]any{"color": "red"}, "spec.size"},
			{"size-below-minimum", map[string]any{"size": int64(0)}, "spec.size"},
			{"size-not-integer", map[string]any{"size": "big"}, "spec.size"},
			{"color-not-in-enum", map[string]any{"size": int64(2), "color": "pink"}, "spec.color"},
		} {
			_, err := wc.Create(ctx, widget(tc.name, tc.spec), metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Errorf("Create(%s, spec %v) = %v, want Invalid", tc.name, tc.spec, err)
				continue
			}
			if fields := causeFields(err); !slices.Contains(fields, tc.wantField) {
				t.Errorf("Create(%s, spec %v) invalid fields = %v, want %s among them", tc.name, tc.spec, fields, tc.wantField)
			}
		}
	})

	t.Run("GetList", func(t *testing.T) {
		got, err := wc.Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Get(w1) = %v", err)
		}
		if diff := cmp.Diff(w1.Object, got.Object); diff != "" {
			t.Errorf("Get(w1) differs from Create(w1) (-create +get):\n%s", diff)
		}
		l, err := wc.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("List() = %v", err)
		}
		var names []string
		for _, it := range l.Items {
			names = append(names, it.GetName())
		}
		if want := []string{"w1", "w2"}; !slices.Equal(names, want) {
			t.Errorf("List() = %v, want %v", names, want)
		}
		if l.GetResourceVersion() == "" || l.GetKind() != "WidgetList" {
			t.Errorf("List() = kind %q rv %q, want WidgetList with a resourceVersion", l.GetKind(), l.GetResourceVersion())
		}
	})

	t.Run("Writes", func(t *testing.T) {
		// Each step changes w1; generation moves only with the spec.
		get := func() *unstructured.Unstructured {
			u, err := wc.Get(ctx, "w1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Get(w1) = %v", err)
			}
			return u
		}
		for _, tc := range []struct {
			name string
			do   func() (*unstructured.Unstructured, error)
			want widgetState
		}{
			{"update spec (status ignored)", func() (*unstructured.Unstructured, error) {
				u := get()
				unstructured.SetNestedField(u.Object, int64(4), "spec", "size")
				unstructured.SetNestedField(u.Object, "Hacked", "status", "phase")
				return wc.Update(ctx, u, metav1.UpdateOptions{})
			}, widgetState{Generation: 2, Size: 4, Color: "red"}},
			{"update labels only", func() (*unstructured.Unstructured, error) {
				u := get()
				u.SetLabels(map[string]string{"tier": "gold"})
				return wc.Update(ctx, u, metav1.UpdateOptions{})
			}, widgetState{Generation: 2, Size: 4, Color: "red"}},
			{"merge patch spec", func() (*unstructured.Unstructured, error) {
				return wc.Patch(ctx, "w1", types.MergePatchType, []byte(`{"spec":{"size":5}}`), metav1.PatchOptions{})
			}, widgetState{Generation: 3, Size: 5, Color: "red"}},
			{"json patch spec", func() (*unstructured.Unstructured, error) {
				return wc.Patch(ctx, "w1", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/color","value":"green"}]`), metav1.PatchOptions{})
			}, widgetState{Generation: 4, Size: 5, Color: "green"}},
			{"merge patch annotations", func() (*unstructured.Unstructured, error) {
				return wc.Patch(ctx, "w1", types.MergePatchType, []byte(`{"metadata":{"annotations":{"note":"x"}}}`), metav1.PatchOptions{})
			}, widgetState{Generation: 4, Size: 5, Color: "green"}},
			{"update status (spec ignored)", func() (*unstructured.Unstructured, error) {
				u := get()
				unstructured.SetNestedField(u.Object, "Ready", "status", "phase")
				unstructured.SetNestedField(u.Object, int64(99), "spec", "size")
				return wc.UpdateStatus(ctx, u, metav1.UpdateOptions{})
			}, widgetState{Generation: 4, Size: 5, Color: "green", Phase: "Ready"}},
			{"merge patch status subresource", func() (*unstructured.Unstructured, error) {
				return wc.Patch(ctx, "w1", types.MergePatchType, []byte(`{"status":{"phase":"Done"},"spec":{"size":77}}`), metav1.PatchOptions{}, "status")
			}, widgetState{Generation: 4, Size: 5, Color: "green", Phase: "Done"}},
			{"update spec keeps status", func() (*unstructured.Unstructured, error) {
				u := get()
				unstructured.SetNestedField(u.Object, int64(6), "spec", "size")
				unstructured.RemoveNestedField(u.Object, "status")
				return wc.Update(ctx, u, metav1.UpdateOptions{})
			}, widgetState{Generation: 5, Size: 6, Color: "green", Phase: "Done"}},
		} {
			before := get()
			out, err := tc.do()
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			after := get()
			if got := stateOf(out); got != tc.want {
				t.Errorf("%s = %+v, want %+v", tc.name, got, tc.want)
			}
			if got := stateOf(after); got != tc.want {
				t.Errorf("Get(w1) after %s = %+v, want %+v", tc.name, got, tc.want)
			}
			if out.GetResourceVersion() == before.GetResourceVersion() || out.GetResourceVersion() != after.GetResourceVersion() {
				t.Errorf("%s: resourceVersion %s -> %s (get %s), want a new one", tc.name, before.GetResourceVersion(), out.GetResourceVersion(), after.GetResourceVersion())
			}
		}
	})

	t.Run("WriteErrors", func(t *testing.T) {
		cur, err := wc.Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Get(w1) = %v", err)
		}
		noRV := cur.DeepCopy()
		noRV.SetResourceVersion("")
		stale := cur.DeepCopy()
		stale.SetResourceVersion(w1.GetResourceVersion())
		bad := cur.DeepCopy()
		unstructured.SetNestedField(bad.Object, int64(0), "spec", "size")
		for _, tc := range []struct {
			name string
			do   func() error
			want metav1.StatusReason
		}{
			{"update without resourceVersion", func() error {
				_, err := wc.Update(ctx, noRV, metav1.UpdateOptions{})
				return err
			}, metav1.StatusReasonInvalid},
			{"update with stale resourceVersion", func() error {
				_, err := wc.Update(ctx, stale, metav1.UpdateOptions{})
				return err
			}, metav1.StatusReasonConflict},
			{"update to invalid spec", func() error {
				_, err := wc.Update(ctx, bad, metav1.UpdateOptions{})
				return err
			}, metav1.StatusReasonInvalid},
			{"merge patch to invalid spec", func() error {
				_, err := wc.Patch(ctx, "w1", types.MergePatchType, []byte(`{"spec":{"color":"pink"}}`), metav1.PatchOptions{})
				return err
			}, metav1.StatusReasonInvalid},
			{"strategic merge patch", func() error {
				_, err := wc.Patch(ctx, "w1", types.StrategicMergePatchType, []byte(`{"spec":{"size":2}}`), metav1.PatchOptions{})
				return err
			}, metav1.StatusReasonUnsupportedMediaType},
			{"create existing", func() error {
				_, err := wc.Create(ctx, widget("w1", map[string]any{"size": int64(1)}), metav1.CreateOptions{})
				return err
			}, metav1.StatusReasonAlreadyExists},
			{"get missing", func() error {
				_, err := wc.Get(ctx, "missing", metav1.GetOptions{})
				return err
			}, metav1.StatusReasonNotFound},
		} {
			if err := tc.do(); apierrors.ReasonForError(err) != tc.want {
				t.Errorf("%s: error = %v, want reason %s", tc.name, err, tc.want)
			}
		}
		if _, err := wc.Patch(ctx, "w1", types.StrategicMergePatchType, []byte(`{}`), metav1.PatchOptions{}); !apierrors.IsUnsupportedMediaType(err) {
			t.Errorf("Patch(w1, strategic merge) = %v, want 415 UnsupportedMediaType", err)
		}
		after, err := wc.Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Get(w1) = %v", err)
		}
		if after.GetResourceVersion() != cur.GetResourceVersion() {
			t.Errorf("Get(w1) after failed writes = rv %s, want unchanged %s", after.GetResourceVersion(), cur.GetResourceVersion())
		}
	})

	t.Run("PrinterColumns", func(t *testing.T) {
		raw, err := cs.CoreV1().RESTClient().Get().
			AbsPath("/apis", widgetGVR.Group, widgetGVR.Version, "namespaces", "crs", widgetGVR.Resource).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
			DoRaw(ctx)
		if err != nil {
			t.Fatalf("GET widgets as Table = %v", err)
		}
		var tbl metav1.Table
		if err := json.Unmarshal(raw, &tbl); err != nil {
			t.Fatalf("decode Table: %v", err)
		}
		var cols []string
		for _, c := range tbl.ColumnDefinitions {
			cols = append(cols, c.Name)
		}
		if want := []string{"Name", "Size", "Color"}; !slices.Equal(cols, want) {
			t.Errorf("Table columns = %v, want %v", cols, want)
		}
		var rows []string
		for _, r := range tbl.Rows {
			rows = append(rows, fmt.Sprint(r.Cells))
		}
		if want := []string{"[w1 6 green]", "[w2 1 blue]"}; !cmp.Equal(rows, want) {
			t.Errorf("Table rows = %q, want %q", rows, want)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		if err := wc.Delete(ctx, "w2", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("Delete(w2) = %v", err)
		}
		if _, err := wc.Get(ctx, "w2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Get(w2) after delete = %v, want NotFound", err)
		}
	})

	t.Run("DeleteCRD", func(t *testing.T) {
		ext, err := apiextensionsclientset.NewForConfig(restConfig(t, env))
		if err != nil {
			t.Fatalf("apiextensions NewForConfig() = %v", err)
		}
		name := widgetCRD().Name
		if err := ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("CustomResourceDefinitions().Delete(%s) = %v", name, err)
		}
		// CRD deletion is asynchronous in Kubernetes: wait for it.
		poll(ctx, t, "CRD "+name+" to be gone", func(ctx context.Context) (bool, error) {
			_, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		poll(ctx, t, "discovery to drop "+widgetGVR.String(), func(ctx context.Context) (bool, error) {
			has, err := discoveryHas(cs, widgetGVR)
			return !has, err
		})
		if _, err := wc.Get(ctx, "w1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Get(w1) after deleting its CRD = %v, want NotFound", err)
		}
		createWidgetCRD(ctx, t, env)
		l, err := dc.Resource(widgetGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("List() after re-creating the CRD = %v", err)
		}
		if len(l.Items) != 0 {
			t.Errorf("List() after re-creating the CRD = %d items, want 0", len(l.Items))
		}
	})
}

// causeFields returns the fields an Invalid error names.
func causeFields(err error) []string {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return nil
	}
	var out []string
	for _, c := range st.Status().Details.Causes {
		out = append(out, c.Field)
	}
	return out
}
