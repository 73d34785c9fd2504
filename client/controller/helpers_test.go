package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/controller"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type CM = *corev1.ConfigMap

var (
	configMaps = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}
	secrets    = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("secrets"), Namespaced: true, Kind: "Secret"}
)

// env is one test server (shared by a test's subtests) with a REST to it.
type env struct {
	*testenv.Env
	rest *client.REST
	cms  *client.Client[CM]
}

func startEnv(t *testing.T) *env {
	t.Helper()
	e := &env{Env: testenv.Start(t)}
	cfg, err := client.FromKubeconfig(e.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	if e.rest, err = client.New(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.rest.CloseIdleConnections)
	e.cms = client.NewClient[CM](e.rest, configMaps)
	return e
}

// run runs r (an informer or a controller) until the test ends, and
// checks it returned.
func run(t *testing.T, r interface{ Run(context.Context) error }) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run() = %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return 30 s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// configMapInformer runs an informer of the ConfigMaps in ns.
func (e *env) configMapInformer(t *testing.T, ns string) *informer.SharedInformer[CM] {
	t.Helper()
	inf, err := informer.New(e.cms, informer.Options[CM]{Namespace: ns, Name: "configmaps/" + ns})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	return inf
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) create(t *testing.T, ns, name string, data map[string]string, owners ...metav1.OwnerReference) CM {
	t.Helper()
	cm, err := e.cms.Create(testContext(t), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: owners}, Data: data,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// recorder is a reconciler that records its calls and does what do says.
type recorder struct {
	mu    sync.Mutex
	calls []controller.Request
	do    func(ctx context.Context, r controller.Request, n int) (controller.Result, error)
	kick  chan struct{} // cap 1: a call happened
}

func newRecorder(do func(ctx context.Context, r controller.Request, n int) (controller.Result, error)) *recorder {
	return &recorder{do: do, kick: make(chan struct{}, 1)}
}

func (r *recorder) Reconcile(ctx context.Context, req controller.Request) (controller.Result, error) {
	r.mu.Lock()
	r.calls = append(r.calls, req)
	n := 0
	for _, c := range r.calls {
		if c == req {
			n++
		}
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	if r.do == nil {
		return controller.Result{}, nil
	}
	return r.do(ctx, req, n)
}

// count returns how often req was reconciled.
func (r *recorder) count(req controller.Request) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c == req {
			n++
		}
	}
	return n
}

// waitFor waits until req was reconciled at least n times.
func (r *recorder) waitFor(t *testing.T, req controller.Request, n int) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for r.count(req) < n {
		select {
		case <-r.kick:
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%v reconciled %d times, want %d", req, r.count(req), n)
		}
	}
}

// never checks that req is not reconciled more than n times for a while.
func (r *recorder) never(t *testing.T, req controller.Request, n int) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	if got := r.count(req); got > n {
		t.Errorf("%v reconciled %d times, want %d", req, got, n)
	}
}
