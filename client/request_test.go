package client_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client"
)

var deployments = client.Resource{GVR: appsv1.SchemeGroupVersion.WithResource("deployments"), Namespaced: true, Kind: "Deployment"}

// TestRequestBuilder drives every verb through the builder against a
// real server: create, read, list with a selector, replace, patch, a
// subresource read and write, delete, and a 404.
func TestRequestBuilder(t *testing.T) {
	_, rc := start(t)
	ctx := ctxFor(t)

	// POST by absolute path, body a typed object.
	cm := newCM("default", "a", map[string]string{"k": "v"})
	cm.Labels = map[string]string{"app": "web"}
	res := rc.Verb("post").AbsPath("/api/v1", "namespaces/default/configmaps").Body(cm).Do(ctx)
	if res.Error() != nil || res.StatusCode() != http.StatusCreated {
		t.Fatalf("POST = %d %v, want 201", res.StatusCode(), res.Error())
	}
	var created corev1.ConfigMap
	if err := res.Into(&created); err != nil || created.UID == "" || created.Data["k"] != "v" {
		t.Fatalf("Into = %v, %+v", err, created)
	}
	if !strings.HasPrefix(res.ContentType(), "application/json") {
		t.Errorf("ContentType() = %q", res.ContentType())
	}

	// GET by resource, namespace and name.
	var got corev1.ConfigMap
	if err := rc.Get().Resource(configMaps).Namespace("default").Name("a").Do(ctx).Into(&got); err != nil || got.ResourceVersion != created.ResourceVersion {
		t.Fatalf("GET = %v, rv %s want %s", err, got.ResourceVersion, created.ResourceVersion)
	}

	// A list with query parameters.
	rc.Post().Resource(configMaps).Namespace("default").Body(newCM("default", "b", nil)).Do(ctx)
	var list corev1.ConfigMapList
	if err := rc.Get().Resource(configMaps).Namespace("default").Param("labelSelector", "app=web").Do(ctx).Into(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "a" {
		t.Errorf("list labelSelector=app=web: %d items, want a alone", len(list.Items))
	}

	// PUT with a body given as JSON text.
	got.Data["k"] = "v2"
	res = rc.Put().Resource(configMaps).Namespace("default").Name("a").Body(mustJSON(t, &got)).Do(ctx)
	if res.StatusCode() != http.StatusOK || res.Into(&got) != nil || got.Data["k"] != "v2" {
		t.Fatalf("PUT = %d %v, data %v", res.StatusCode(), res.Error(), got.Data)
	}

	// PATCH: merge and JSON patch.
	if err := rc.Patch(types.MergePatchType).Resource(configMaps).Namespace("default").Name("a").Body(`{"data":{"m":"merge"}}`).Do(ctx).Into(&got); err != nil || got.Data["m"] != "merge" {
		t.Fatalf("merge PATCH = %v, data %v", err, got.Data)
	}
	res = rc.Patch(types.JSONPatchType).Resource(configMaps).Namespace("default").Name("a").Body(`[{"op":"test","path":"/data/m","value":"other"}]`).Do(ctx)
	if res.StatusCode() != http.StatusUnprocessableEntity && !errors.Is(res.Error(), client.ErrInvalid) && !errors.Is(res.Error(), client.ErrConflict) {
		t.Errorf("failing JSON patch test = %d %v", res.StatusCode(), res.Error())
	}

	// A subresource: a Deployment's scale, read and written.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}},
	}}
	if err := rc.Post().Resource(deployments).Namespace("default").Body(dep).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	var scale autoscalingv1.Scale
	if err := rc.Get().Resource(deployments).Namespace("default").Name("web").SubResource("scale").Do(ctx).Into(&scale); err != nil || scale.Kind != "Scale" {
		t.Fatalf("GET scale = %v, %+v", err, scale)
	}
	scale.Spec.Replicas = 4
	if err := rc.Put().Resource(deployments).Namespace("default").Name("web").SubResource("scale").Body(&scale).Do(ctx).Into(&scale); err != nil || scale.Spec.Replicas != 4 {
		t.Fatalf("PUT scale = %v, replicas %d", err, scale.Spec.Replicas)
	}
	var d appsv1.Deployment
	if err := rc.Get().AbsPath("/apis/apps/v1/namespaces/default/deployments/web").Do(ctx).Into(&d); err != nil || *d.Spec.Replicas != 4 {
		t.Fatalf("deployment after scale: %v, replicas %v", err, d.Spec.Replicas)
	}

	// DELETE, then a 404 as a *StatusError.
	if res := rc.Delete().Resource(configMaps).Namespace("default").Name("a").Do(ctx); res.Error() != nil || res.StatusCode() != http.StatusOK {
		t.Fatalf("DELETE = %d %v", res.StatusCode(), res.Error())
	}
	res = rc.Get().Resource(configMaps).Namespace("default").Name("a").Do(ctx)
	var se *client.StatusError
	if !errors.As(res.Error(), &se) || !errors.Is(res.Error(), client.ErrNotFound) || res.StatusCode() != http.StatusNotFound || se.ErrStatus.Details.Name != "a" {
		t.Fatalf("GET deleted = %d %v (%T), want a 404 StatusError naming it", res.StatusCode(), res.Error(), res.Error())
	}
	if err := res.Into(&got); err != res.Error() {
		t.Errorf("Into after a 404 = %v, want the StatusError", err)
	}
}

// TestRequestBuilderErrors: parts that cannot make a request are errors
// from Do, before anything is sent.
func TestRequestBuilderErrors(t *testing.T) {
	_, rc := start(t)
	ctx := ctxFor(t)
	nodes := client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("nodes")}
	for _, c := range []struct {
		name string
		req  *client.Request
		want string
	}{
		{"slash in name", rc.Get().Resource(configMaps).Namespace("default").Name("a/b"), `name "a/b"`},
		{"dot-dot namespace", rc.Get().Resource(configMaps).Namespace(".."), `namespace ".."`},
		{"no path", rc.Get(), "neither AbsPath nor Resource"},
		{"both paths", rc.Get().AbsPath("/api/v1").Resource(configMaps), "AbsPath with Resource"},
		{"namespace of cluster-scoped", rc.Get().Resource(nodes).Namespace("default"), "cluster-scoped nodes"},
		{"subresource without name", rc.Get().Resource(configMaps).SubResource("status"), "SubResource without Name"},
		{"patch without type", rc.Verb("PATCH").Resource(configMaps).Namespace("default").Name("a").Body("{}"), "PATCH without a patch type"},
		{"body that does not encode", rc.Post().Resource(configMaps).Body(func() {}), "encode body"},
		{"empty verb", rc.Verb("").AbsPath("/api"), "empty verb"},
	} {
		res := c.req.Do(ctx)
		if res.Error() == nil || !strings.Contains(res.Error().Error(), c.want) || res.StatusCode() != 0 {
			t.Errorf("%s: Do = %d %v, want an error with %q", c.name, res.StatusCode(), res.Error(), c.want)
		}
	}
	if u, err := rc.Get().Resource(configMaps).Namespace("ns").Name("x").SubResource("status").Param("dryRun", "All").URL(); err != nil || u != "/api/v1/namespaces/ns/configmaps/x/status?dryRun=All" {
		t.Errorf("URL() = %q, %v", u, err)
	}
	// Raw still works beside the builder.
	if b, err := rc.Raw(ctx, "/version"); err != nil || !strings.Contains(string(b), "gitVersion") {
		t.Errorf("Raw(/version) = %s, %v", b, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRequestStream: a watch read as a stream through the builder, and a
// 404 as a *StatusError.
func TestRequestStream(t *testing.T) {
	_, rc := start(t)
	ctx := ctxFor(t)
	if err := rc.Post().Resource(configMaps).Namespace("default").Body(newCM("default", "s", nil)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	body, err := rc.Get().Resource(configMaps).Namespace("default").Param("watch", "true").Param("fieldSelector", "metadata.name=s").Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Type   string
		Object corev1.ConfigMap
	}
	err = json.NewDecoder(body).Decode(&ev)
	body.Close()
	if err != nil || ev.Type != "ADDED" || ev.Object.Name != "s" {
		t.Fatalf("first watch event = %+v, %v; want ADDED s", ev, err)
	}
	_, err = rc.Get().Resource(configMaps).Namespace("default").Name("missing").Stream(ctx)
	if !errors.Is(err, client.ErrNotFound) {
		t.Errorf("stream of a missing object: %v, want ErrNotFound", err)
	}
	if res := rc.Post().Resource(configMaps).Namespace("default").Body(nil).Do(ctx); !errors.Is(res.Error(), client.ErrBadRequest) && res.StatusCode() < 400 {
		t.Errorf("POST without a body = %d %v, want it refused", res.StatusCode(), res.Error())
	}
}
