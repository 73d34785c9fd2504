package recording_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/recording"
	"github.com/objwatch/objwatch/testenv"
)

var deployments = client.Resource{GVR: appsv1.SchemeGroupVersion.WithResource("deployments"), Namespaced: true, Kind: "Deployment"}

func deployment(name, rv string, replicas, ready int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: rv, UID: "recorded-uid",
			Finalizers: []string{"recorded.example/finalizer"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
		Status: appsv1.DeploymentStatus{Replicas: ready, ReadyReplicas: ready},
	}
}

// TestReplayIntoServer plays Deployments into a fresh server: the missing
// namespace is created, statuses go through the status subresource,
// recorded UIDs and finalizers are not written, and a recorded relist
// writes what it changed (an update, a create, a delete).
func TestReplayIntoServer(t *testing.T) {
	const res = "apps/v1/deployments"
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{res}}, recording.Options{Now: fakeClock(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.Object(recording.Initial, res, deployment("web", "10", 3, 3)))
	must(t, w.Object(recording.Initial, res, deployment("db", "11", 1, 1)))
	must(t, w.Marker(recording.Synced, res, "11"))
	must(t, w.Object(recording.Modified, res, deployment("web", "12", 5, 3)))
	must(t, w.Marker(recording.Gone, res, "12"))
	must(t, w.Marker(recording.Relist, res, ""))
	must(t, w.Object(recording.Listed, res, deployment("web", "15", 5, 5)))
	must(t, w.Object(recording.Listed, res, deployment("api", "16", 2, 0)))
	must(t, w.Marker(recording.Synced, res, "16"))
	must(t, w.Close())
	rec, err := recording.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}

	env := testenv.Start(t)
	rc, err := client.New(env.Config.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var actions []string
	st, err := recording.Replay(ctx, rc, rec, recording.ReplayOptions{After: func(it recording.Item, action, key string) {
		actions = append(actions, action+" "+key)
	}})
	if err != nil {
		t.Fatal(err)
	}
	check(t, actions, "create shop/web", "create shop/db", "update shop/web", "update shop/web", "create shop/api", "delete shop/db")
	if st != (recording.ReplayStats{Creates: 3, Updates: 2, Deletes: 1}) {
		t.Errorf("stats %+v", st)
	}
	c := client.NewClient[*appsv1.Deployment](rc, deployments)
	l, err := c.List(ctx, "shop", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range l.Items {
		if d.UID == "recorded-uid" || len(d.Finalizers) > 0 {
			t.Errorf("%s written with the recorded uid or finalizers: %s %v", d.Name, d.UID, d.Finalizers)
		}
		got = append(got, fmtDeployment(d))
	}
	check(t, got, "api replicas=2 ready=0", "web replicas=5 ready=5")
}

func fmtDeployment(d *appsv1.Deployment) string {
	return d.Name + " replicas=" + itoa(int(*d.Spec.Replicas)) + " ready=" + itoa(int(d.Status.ReadyReplicas))
}
