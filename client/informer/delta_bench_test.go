package informer

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsjson "sigs.k8s.io/json"

	"github.com/objwatch/objwatch/client"
)

var nodes = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("nodes"), Kind: "Node"}

// bigNode is a Node of about 40 KiB, most of it status (images,
// conditions), as issue 26's benchmark scenario has.
func bigNode() *corev1.Node {
	n := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "8f7e6d5c-0000-4000-8000-000000000001", ResourceVersion: "1000",
			Labels: map[string]string{"kubernetes.io/hostname": "node-1", "topology.kubernetes.io/zone": "zone-a"}},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}}}
	for i := range 5 {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(fmt.Sprintf("Condition%d", i)),
			Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.NewTime(time.Unix(1700000000, 0)), Reason: "KubeletHasNoProblem",
			Message: "kubelet reports no problem of this kind on the node"})
	}
	for i := 0; ; i++ {
		b, _ := json.Marshal(n)
		if len(b) >= 40<<10 {
			return n
		}
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{SizeBytes: int64(100_000_000 + i),
			Names: []string{fmt.Sprintf("registry.example.com/team-%d/image-%d@sha256:%064d", i%7, i, i), fmt.Sprintf("registry.example.com/team-%d/image-%d:v1.%d.0", i%7, i, i)}})
	}
}

const (
	deltaIdentity = `{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-1","uid":"8f7e6d5c-0000-4000-8000-000000000001","resourceVersion":"1001"}}`
	deltaPatch    = `[{"op":"replace","path":"/metadata/resourceVersion","value":"1001"},{"op":"replace","path":"/status/conditions/0/lastHeartbeatTime","value":"2023-11-14T22:13:30Z"}]`
)

// BenchmarkDeltaEvent is the client's CPU per MODIFIED event of a 40 KiB
// Node whose heartbeat changed: decoding the whole object (a full watch)
// against decoding a delta event's identity and applying its patch to
// the cached copy (watchDeltas), for typed and unstructured objects; and,
// for comparison, applying the patch with evanphx/json-patch to the
// cached copy's JSON, as an informer without a decoded-JSON applier would.
func BenchmarkDeltaEvent(b *testing.B) {
	node := bigNode()
	full, _ := json.Marshal(node)
	full = []byte(string(full)) // the event's object as the server sends it
	var cachedU map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(full, &cachedU); err != nil {
		b.Fatal(err)
	}
	id := client.Meta{Name: "node-1", UID: string(node.UID), ResourceVersion: "1001"}
	b.Logf("object %d bytes, delta event %d bytes", len(full), len(deltaIdentity)+len(deltaPatch))

	b.Run("full/typed", func(b *testing.B) {
		b.SetBytes(int64(len(full)))
		for b.Loop() {
			var n corev1.Node
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(full, &n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("full/unstructured", func(b *testing.B) {
		for b.Loop() {
			var m map[string]any
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(full, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	typed := &reflector[*corev1.Node]{client: client.NewClient[*corev1.Node](nil, nodes), metrics: &metrics{}}
	b.Run("delta/typed", func(b *testing.B) {
		for b.Loop() {
			var m client.Meta
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts([]byte(deltaIdentity), &metaHolder{&m}); err != nil {
				b.Fatal(err)
			}
			if _, err := typed.patched(node, id, []byte(deltaPatch)); err != nil {
				b.Fatal(err)
			}
		}
	})
	unstr := &reflector[*unstructured.Unstructured]{client: client.NewUnstructured(nil, nodes), metrics: &metrics{}}
	cached := &unstructured.Unstructured{Object: cachedU}
	b.Run("delta/unstructured", func(b *testing.B) {
		for b.Loop() {
			var m client.Meta
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts([]byte(deltaIdentity), &metaHolder{&m}); err != nil {
				b.Fatal(err)
			}
			if _, err := unstr.patched(cached, id, []byte(deltaPatch)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("delta/typed-evanphx", func(b *testing.B) {
		for b.Loop() {
			doc, err := json.Marshal(node)
			if err != nil {
				b.Fatal(err)
			}
			p, err := jsonpatch.DecodePatch([]byte(deltaPatch))
			if err != nil {
				b.Fatal(err)
			}
			out, err := p.Apply(doc)
			if err != nil {
				b.Fatal(err)
			}
			var n corev1.Node
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(out, &n); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// metaHolder decodes an event object's identity.
type metaHolder struct{ m *client.Meta }

func (h *metaHolder) UnmarshalJSON(data []byte) error {
	var o struct {
		Metadata struct {
			Namespace, Name, UID, ResourceVersion string
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &o); err != nil {
		return err
	}
	*h.m = client.Meta{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, UID: o.Metadata.UID, ResourceVersion: o.Metadata.ResourceVersion}
	return nil
}

// TestPatchedBroken: a delta event that does not fit the cached copy is
// errBrokenStream (the reflector relists), and the cached copy is intact.
func TestPatchedBroken(t *testing.T) {
	node := bigNode()
	before, _ := json.Marshal(node)
	r := &reflector[*corev1.Node]{client: client.NewClient[*corev1.Node](nil, nodes), metrics: &metrics{}}
	id := client.Meta{Name: "node-1", UID: string(node.UID), ResourceVersion: "1001"}
	for _, c := range []struct {
		name  string
		id    client.Meta
		patch string
	}{
		{"other uid", client.Meta{Name: "node-1", UID: "x", ResourceVersion: "1001"}, deltaPatch},
		{"not a patch", id, `{"op":"replace"}`},
		{"missing path", id, `[{"op":"replace","path":"/status/none","value":1},{"op":"replace","path":"/metadata/resourceVersion","value":"1001"}]`},
		{"other resourceVersion", id, `[{"op":"replace","path":"/metadata/resourceVersion","value":"999"}]`},
		{"not an object", id, `[{"op":"replace","path":"","value":[]}]`},
	} {
		if _, err := r.patched(node, c.id, []byte(c.patch)); !errors.Is(err, errBrokenStream) {
			t.Errorf("%s: %v, want errBrokenStream", c.name, err)
		}
	}
	got, err := r.patched(node, id, []byte(deltaPatch))
	if err != nil || got.ResourceVersion != "1001" || !got.Status.Conditions[0].LastHeartbeatTime.Equal(&metav1.Time{Time: time.Unix(1700000010, 0)}) {
		t.Errorf("patched: %v, %v", err, got.Status.Conditions[0].LastHeartbeatTime)
	}
	if after, _ := json.Marshal(node); string(after) != string(before) {
		t.Error("patched modified the cached object")
	}
	if r.metrics.deltas.Load() != 1 {
		t.Errorf("%d deltas counted, want 1", r.metrics.deltas.Load())
	}
}
