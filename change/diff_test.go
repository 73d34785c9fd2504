package change_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/objwatch/objwatch/change"
)

func obj(s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		paths    []string
		patch    string
	}{
		{
			name:  "equal",
			old:   `{"a":1,"b":[1,2],"c":{"d":null}}`,
			new:   `{"c":{"d":null},"b":[1,2],"a":1.0}`,
			patch: `null`,
		},
		{
			name:  "scalar",
			old:   `{"spec":{"replicas":1}}`,
			new:   `{"spec":{"replicas":3}}`,
			paths: []string{"spec.replicas"},
			patch: `[{"op":"replace","path":"/spec/replicas","value":3}]`,
		},
		{
			name:  "members sorted",
			old:   `{"metadata":{"labels":{"app":"web","z":"1","a":"1"}}}`,
			new:   `{"metadata":{"labels":{"app":"api","tier":"fe"}}}`,
			paths: []string{"metadata.labels.a", "metadata.labels.app", "metadata.labels.tier", "metadata.labels.z"},
			patch: `[{"op":"remove","path":"/metadata/labels/a"},{"op":"replace","path":"/metadata/labels/app","value":"api"},{"op":"add","path":"/metadata/labels/tier","value":"fe"},{"op":"remove","path":"/metadata/labels/z"}]`,
		},
		{
			name:  "pointer escaping",
			old:   `{"metadata":{"annotations":{"app.kubernetes.io/name":"a","t~":"x"}}}`,
			new:   `{"metadata":{"annotations":{"app.kubernetes.io/name":"b","t~":"y"}}}`,
			paths: []string{`metadata.annotations["app.kubernetes.io/name"]`, `metadata.annotations["t~"]`},
			patch: `[{"op":"replace","path":"/metadata/annotations/app.kubernetes.io~1name","value":"b"},{"op":"replace","path":"/metadata/annotations/t~0","value":"y"}]`,
		},
		{
			name:  "null to value",
			old:   `{"a":null}`,
			new:   `{"a":{"b":1}}`,
			paths: []string{"a"},
			patch: `[{"op":"replace","path":"/a","value":{"b":1}}]`,
		},
		{
			name:  "value to null",
			old:   `{"a":[1]}`,
			new:   `{"a":null}`,
			paths: []string{"a"},
			patch: `[{"op":"replace","path":"/a","value":null}]`,
		},
		{
			name:  "keyed list item field",
			old:   `{"spec":{"containers":[{"name":"web","image":"nginx:1"},{"name":"log","image":"fluent:1"}]}}`,
			new:   `{"spec":{"containers":[{"name":"web","image":"nginx:2"},{"name":"log","image":"fluent:1"}]}}`,
			paths: []string{"spec.containers[name=web].image"},
			patch: `[{"op":"replace","path":"/spec/containers/0/image","value":"nginx:2"}]`,
		},
		{
			name:  "keyed list add remove move",
			old:   `{"c":[{"name":"a"},{"name":"b","v":1},{"name":"c"}]}`,
			new:   `{"c":[{"name":"c"},{"name":"b","v":2},{"name":"d"}]}`,
			paths: []string{"c[name=a]", "c[name=c]", "c[name=b].v", "c[name=d]"},
			patch: `[{"op":"remove","path":"/c/0"},{"op":"move","from":"/c/1","path":"/c/0"},{"op":"replace","path":"/c/1/v","value":2},{"op":"add","path":"/c/2","value":{"name":"d"}}]`,
		},
		{
			name:  "conditions keyed by type",
			old:   `{"status":{"conditions":[{"type":"Ready","status":"False"},{"type":"Synced","status":"True"}]}}`,
			new:   `{"status":{"conditions":[{"type":"Ready","status":"True"},{"type":"Synced","status":"True"}]}}`,
			paths: []string{"status.conditions[type=Ready].status"},
			patch: `[{"op":"replace","path":"/status/conditions/0/status","value":"True"}]`,
		},
		{
			name:  "quoted merge value",
			old:   `{"c":[{"name":"my app","x":1}]}`,
			new:   `{"c":[{"name":"my app","x":2}]}`,
			paths: []string{`c[name="my app"].x`},
			patch: `[{"op":"replace","path":"/c/0/x","value":2}]`,
		},
		{
			name:  "duplicate names are positional",
			old:   `{"c":[{"name":"a","x":1},{"name":"a","x":2}]}`,
			new:   `{"c":[{"name":"a","x":1},{"name":"a","x":3}]}`,
			paths: []string{"c[1].x"},
			patch: `[{"op":"replace","path":"/c/1/x","value":3}]`,
		},
		{
			name:  "insert at head",
			old:   `{"args":["b","c","d"]}`,
			new:   `{"args":["a","b","c","d"]}`,
			paths: []string{"args[0]"},
			patch: `[{"op":"add","path":"/args/0","value":"a"}]`,
		},
		{
			name:  "remove in middle",
			old:   `{"args":["a","b","c","d"]}`,
			new:   `{"args":["a","d"]}`,
			paths: []string{"args[2]", "args[1]"},
			patch: `[{"op":"remove","path":"/args/2"},{"op":"remove","path":"/args/1"}]`,
		},
		{
			name:  "append",
			old:   `{"finalizers":["a"]}`,
			new:   `{"finalizers":["a","b","c"]}`,
			paths: []string{"finalizers[1]", "finalizers[2]"},
			patch: `[{"op":"add","path":"/finalizers/1","value":"b"},{"op":"add","path":"/finalizers/2","value":"c"}]`,
		},
		{
			name:  "type change",
			old:   `{"a":"1"}`,
			new:   `{"a":1}`,
			paths: []string{"a"},
			patch: `[{"op":"replace","path":"/a","value":1}]`,
		},
		{
			name:  "odd member names",
			old:   `{"":1,"*":1,"[0]":1}`,
			new:   `{"":2,"*":2,"[0]":2}`,
			paths: []string{`[""]`, `["*"]`, `["[0]"]`},
			patch: `[{"op":"replace","path":"/","value":2},{"op":"replace","path":"/*","value":2},{"op":"replace","path":"/[0]","value":2}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := obj(tt.old), obj(tt.new)
			d := exact.Between(old, new)
			if err := d.Err(); err != nil {
				t.Fatalf("Err() = %v", err)
			}
			if got := d.Paths(); !slices.Equal(got, tt.paths) {
				t.Errorf("Paths() = %q, want %q", got, tt.paths)
			}
			got := string(mustJSON(t, d.Patch()))
			if got != tt.patch {
				t.Errorf("Patch() = %s, want %s", got, tt.patch)
			}
			if d.Empty() != (tt.patch == "null") {
				t.Errorf("Empty() = %v, want %v", d.Empty(), tt.patch == "null")
			}
			checkPatch(t, old, new, d)
		})
	}
}

// checkPatch checks that d's patch turns old into new (with
// evanphx/json-patch, which Kubernetes uses to apply JSON patches), and
// that every change's path names its old and new values.
func checkPatch(t *testing.T, old, new any, d *change.Diff) {
	t.Helper()
	oldJSON := mustJSON(t, old)
	p, err := jsonpatch.DecodePatch(mustJSON(t, d.Patch()))
	if err != nil {
		t.Fatalf("DecodePatch: %v", err)
	}
	got, err := p.Apply(oldJSON)
	if err != nil {
		t.Fatalf("Apply(%s, %s) = %v", mustJSON(t, d.Patch()), oldJSON, err)
	}
	var gotV any
	if err := json.Unmarshal(got, &gotV); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(jsonValue(t, new), gotV); diff != "" {
		t.Fatalf("patch(old) != new (-want +got):\n%s\nold: %s\npatch: %s", diff, oldJSON, mustJSON(t, d.Patch()))
	}
	oldV, newV := jsonValue(t, old), jsonValue(t, new)
	for _, c := range d.Changes() {
		if c.Op == change.OpMove {
			continue
		}
		ov, ook := resolve(oldV, c.Path)
		nv, nok := resolve(newV, c.Path)
		// An index names a position, which the other list may have too.
		positional := len(c.Path) > 0 && c.Path[len(c.Path)-1].Item && c.Path[len(c.Path)-1].MergeKey == ""
		if c.Op != change.OpAdd && (!ook || !reflect.DeepEqual(ov, jsonValue(t, c.Old))) {
			t.Fatalf("change %s %s: Old = %v, at path in old: %v (found %v)", c.Op, c.Path, c.Old, ov, ook)
		}
		if c.Op != change.OpRemove && (!nok || !reflect.DeepEqual(nv, jsonValue(t, c.New))) {
			t.Fatalf("change %s %s: New = %v, at path in new: %v (found %v)", c.Op, c.Path, c.New, nv, nok)
		}
		if !positional && (c.Op == change.OpAdd && ook || c.Op == change.OpRemove && nok) {
			t.Fatalf("change %s %s: found in old %v, in new %v", c.Op, c.Path, ook, nok)
		}
	}
}

// resolve finds the value at p in v.
func resolve(v any, p change.Path) (any, bool) {
	for _, s := range p {
		switch {
		case !s.Item:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[s.Field]; !ok {
				return nil, false
			}
		case s.MergeKey != "":
			l, _ := v.([]any)
			found := false
			for _, it := range l {
				if m, ok := it.(map[string]any); ok && m[s.MergeKey] == s.MergeValue {
					v, found = it, true
					break
				}
			}
			if !found {
				return nil, false
			}
		default:
			l, ok := v.([]any)
			if !ok || s.Index >= len(l) {
				return nil, false
			}
			v = l[s.Index]
		}
	}
	return v, true
}

// TestDiffProperties: on random pairs of objects, the patch turns old into
// new, every change's path names its values, paths parse back as patterns
// that match their change, and a diff of an object with itself is empty.
func TestDiffProperties(t *testing.T) {
	g := newGen(t, 1)
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		old := g.object(4)
		var new map[string]any
		if i%10 == 0 {
			new = g.object(4) // unrelated
		} else {
			nv, ok := g.mutate(old).(map[string]any)
			if !ok {
				nv = g.object(3)
			}
			new = nv
		}
		d := exact.Between(old, new)
		if err := d.Err(); err != nil {
			t.Fatalf("Err() = %v", err)
		}
		checkPatch(t, old, new, d)
		for _, c := range d.Changes() {
			p, err := change.ParsePattern(c.Path.String())
			if len(c.Path) == 0 {
				continue
			}
			if err != nil {
				t.Fatalf("ParsePattern(%q) = %v", c.Path, err)
			}
			if p.String() != c.Path.String() || !p.Match(c) {
				t.Fatalf("pattern %q does not match its change", p)
			}
		}
		if same := exact.Between(old, deepCopy(old)); !same.Empty() {
			t.Fatalf("Between(x, copy of x) = %v, want empty", same.Paths())
		}
		if back := exact.Between(new, old); back.Empty() != d.Empty() {
			t.Fatalf("Between(new, old).Empty() = %v, want %v", back.Empty(), d.Empty())
		}
	}
}

func deployment() *appsv1.Deployment {
	replicas := int32(3)
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{Kind: "Deployment", APIVersion: "apps/v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default", UID: "6b1f2a3c-1c2d-4e5f-8a9b-0c1d2e3f4a5b", ResourceVersion: "4242", Generation: 3,
			Labels:            map[string]string{"app": "web", "tier": "frontend"},
			Annotations:       map[string]string{"deployment.kubernetes.io/revision": "3"},
			CreationTimestamp: metav1.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC),
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{
						Name: "web", Image: "nginx:1.27",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}},
						Env:   []corev1.EnvVar{{Name: "MODE", Value: "prod"}, {Name: "LOG", Value: "info"}},
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
						}},
					},
					{Name: "proxy", Image: "envoy:1.30", Args: []string{"--config", "/etc/envoy.yaml"}},
				}},
			},
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 3, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, UpdatedReplicas: 3,
			Conditions: []appsv1.DeploymentCondition{{
				Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue,
				Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability.",
			}},
		},
	}
}

// TestDiffTyped: typed objects diff exactly as their unstructured forms,
// and as their JSON.
func TestDiffTyped(t *testing.T) {
	edits := []struct {
		name  string
		edit  func(d *appsv1.Deployment)
		paths []string
	}{
		{"image", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.28" },
			[]string{"spec.template.spec.containers[name=web].image"}},
		{"replicas", func(d *appsv1.Deployment) { *d.Spec.Replicas = 5 }, []string{"spec.replicas"}},
		{"replicas nil", func(d *appsv1.Deployment) { d.Spec.Replicas = nil }, []string{"spec.replicas"}},
		{"label", func(d *appsv1.Deployment) { d.Labels["tier"] = "backend"; d.Labels["new"] = "x" },
			[]string{"metadata.labels.new", "metadata.labels.tier"}},
		{"quantity", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1")
		}, []string{"spec.template.spec.containers[name=web].resources.limits.cpu"}},
		{"same quantity other spelling", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("134217728")
		}, []string{"spec.template.spec.containers[name=web].resources.limits.memory"}},
		{"time", func(d *appsv1.Deployment) { d.CreationTimestamp = metav1.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) },
			[]string{"metadata.creationTimestamp"}},
		{"deletion", func(d *appsv1.Deployment) {
			now := metav1.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			d.DeletionTimestamp = &now
		},
			[]string{"metadata.deletionTimestamp"}},
		{"condition", func(d *appsv1.Deployment) { d.Status.Conditions[0].Status = corev1.ConditionFalse },
			[]string{"status.conditions[type=Available].status"}},
		{"container added", func(d *appsv1.Deployment) {
			c := &d.Spec.Template.Spec
			c.Containers = append([]corev1.Container{{Name: "init", Image: "busybox"}}, c.Containers...)
		}, []string{"spec.template.spec.containers[name=init]"}},
		{"containers swapped", func(d *appsv1.Deployment) {
			c := d.Spec.Template.Spec.Containers
			c[0], c[1] = c[1], c[0]
		}, []string{"spec.template.spec.containers[name=proxy]"}},
		{"empty labels omitted", func(d *appsv1.Deployment) { d.Labels = map[string]string{} }, []string{"metadata.labels"}},
		{"nothing", func(d *appsv1.Deployment) {}, nil},
	}
	for _, tt := range edits {
		t.Run(tt.name, func(t *testing.T) {
			old, new := deployment(), deployment()
			tt.edit(new)
			d := exact.Between(old, new)
			if err := d.Err(); err != nil {
				t.Fatalf("Err() = %v", err)
			}
			if got := d.Paths(); !slices.Equal(got, tt.paths) {
				t.Errorf("Paths() = %q, want %q", got, tt.paths)
			}
			checkPatch(t, old, new, d)

			uo, err := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
			if err != nil {
				t.Fatal(err)
			}
			un, err := runtime.DefaultUnstructuredConverter.ToUnstructured(new)
			if err != nil {
				t.Fatal(err)
			}
			ud := exact.Between(&unstructured.Unstructured{Object: uo}, &unstructured.Unstructured{Object: un})
			if diff := cmp.Diff(ud.Patch(), d.Patch()); diff != "" {
				t.Errorf("typed and unstructured patches differ (-unstructured +typed):\n%s", diff)
			}
			jd := exact.Between(json.RawMessage(mustJSON(t, old)), json.RawMessage(mustJSON(t, new)))
			if got, want := string(mustJSON(t, jd.Patch())), string(mustJSON(t, d.Patch())); got != want {
				t.Errorf("JSON patch = %s, typed patch = %s", got, want)
			}
		})
	}
}

func TestDiffMergeKeys(t *testing.T) {
	tests := []struct {
		keys     []string
		old, new string
		want     []string
	}{
		{nil, `{"p":[{"port":80,"protocol":"TCP"},{"port":53,"protocol":"UDP"}]}`, `{"p":[{"port":80,"protocol":"TCP"},{"port":54,"protocol":"UDP"}]}`,
			[]string{"p[1].port"}},
		{[]string{"protocol"}, `{"p":[{"port":80,"protocol":"TCP"},{"port":53,"protocol":"UDP"}]}`, `{"p":[{"port":80,"protocol":"TCP"},{"port":54,"protocol":"UDP"}]}`,
			[]string{"p[protocol=UDP].port"}},
		{[]string{"protocol"}, `{"p":[{"port":80,"protocol":"TCP"},{"port":53,"protocol":"UDP"}]}`, `{"p":[{"port":80,"protocol":"TCP"},{"port":53,"protocol":"TCP"}]}`,
			[]string{"p[1].protocol"}}, // not unique in new: by position
		{[]string{"nope", "port"}, `{"p":[{"port":80}]}`, `{"p":[{"port":80,"x":1}]}`,
			[]string{"p[0].x"}}, // numbers are no keys
	}
	for _, tt := range tests {
		d := change.Differ{MergeKeys: tt.keys}.Between(obj(tt.old), obj(tt.new))
		if got := d.Paths(); !slices.Equal(got, tt.want) {
			t.Errorf("Differ{%q}.Between(%s, %s).Paths() = %q, want %q", tt.keys, tt.old, tt.new, got, tt.want)
		}
	}
}

func TestDiffValues(t *testing.T) {
	type inner struct {
		N  int     `json:"n"`
		F  float32 `json:"f,omitempty"`
		B  []byte  `json:"b,omitempty"`
		M  map[string]int
		IP *int `json:"ip"`
	}
	tests := []struct {
		name     string
		old, new any
		want     []change.Change
	}{
		{"ints", 1, 2, []change.Change{{Path: nil, Op: change.OpReplace, Old: int64(1), New: int64(2)}}},
		{"int and float", 1, 1.0, nil},
		{"nil and typed nil", nil, (*inner)(nil), nil},
		{"struct fields", inner{N: 1, M: map[string]int{"a": 1}}, inner{N: 1, F: 0.5, B: []byte("hi"), M: map[string]int{"a": 2}},
			[]change.Change{
				{Path: change.Path{{Field: "M"}, {Field: "a"}}, Op: change.OpReplace, Old: int64(1), New: int64(2)},
				{Path: change.Path{{Field: "b"}}, Op: change.OpAdd, New: "aGk="},
				{Path: change.Path{{Field: "f"}}, Op: change.OpAdd, New: 0.5},
			}},
		{"map with any", map[string]any{"s": []string{"a"}, "m": map[string]string{"k": "v"}}, map[string]any{"s": []string{"a", "b"}, "m": map[string]string{}},
			[]change.Change{
				{Path: change.Path{{Field: "m"}, {Field: "k"}}, Op: change.OpRemove, Old: "v"},
				{Path: change.Path{{Field: "s"}, {Item: true, Index: 1}}, Op: change.OpAdd, New: "b"},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := exact.Between(tt.old, tt.new)
			if err := d.Err(); err != nil {
				t.Fatalf("Err() = %v", err)
			}
			if diff := cmp.Diff(tt.want, d.Changes()); diff != "" {
				t.Errorf("Changes() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiffErr(t *testing.T) {
	d := exact.Between(map[string]any{"f": func() {}}, map[string]any{})
	if d.Err() == nil || d.Empty() || d.Changes() != nil || d.Patch() != nil {
		t.Errorf("Between(func) = err %v, empty %v, want an error and not empty", d.Err(), d.Empty())
	}
	if !strings.Contains(d.Err().Error(), "func()") {
		t.Errorf("Err() = %v, want it to name the type", d.Err())
	}
}

// TestDiffConcurrent: a Diff's results are computed once, whoever asks.
func TestDiffConcurrent(t *testing.T) {
	old, new := deployment(), deployment()
	new.Spec.Template.Spec.Containers[1].Image = "envoy:2"
	d := exact.Between(old, new)
	var wg sync.WaitGroup
	results := make([][]string, 8)
	for i := range results {
		wg.Go(func() {
			if i%2 == 0 {
				_ = d.Patch()
			}
			results[i] = d.Paths()
		})
	}
	wg.Wait()
	for _, r := range results {
		if !slices.Equal(r, []string{"spec.template.spec.containers[name=proxy].image"}) {
			t.Errorf("Paths() = %q", r)
		}
	}
}

// exact is the Differ of every change, noise included: what the property
// tests check patches with, since a patch of it turns old into new.
var exact = change.Differ{KeepNoise: true}
