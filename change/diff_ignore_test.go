package change_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/change"
)

// TestDifferExcludeTyped: Differ.Exclude is the ignore option for typed
// objects too: status, generation and a label pattern left out of a
// Deployment's diff read in place, with the Noise fields.
func TestDifferExcludeTyped(t *testing.T) {
	old := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", ResourceVersion: "1", Generation: 1,
		Labels: map[string]string{"app": "web", "rollout/hash": "a"}}}
	new := old.DeepCopy()
	new.ResourceVersion, new.Generation = "2", 2
	new.Labels["rollout/hash"] = "b"
	new.Status.ReadyReplicas = 3
	replicas := int32(5)
	new.Spec.Replicas = &replicas
	d := change.Differ{Exclude: []string{"status", "metadata.generation", `metadata.labels["rollout/hash"]`}}
	if got := d.Between(old, new).Paths(); !slices.Equal(got, []string{"spec.replicas"}) {
		t.Errorf("Paths() = %q, want [spec.replicas]", got)
	}
	if p := d.Between(old, new).Patch(); len(p) != 1 || p[0].Path != "/spec/replicas" {
		t.Errorf("Patch() = %+v, want the replicas alone", p)
	}
	all := change.Differ{KeepNoise: true}.Between(old, new).Paths()
	want := []string{"metadata.generation", "metadata.labels.rollout/hash", "metadata.resourceVersion", "spec.replicas", "status.readyReplicas"}
	if !slices.Equal(all, want) {
		t.Errorf("KeepNoise: Paths() = %q, want %q", all, want)
	}
}
